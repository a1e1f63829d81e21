/**
 * Property-based fuzzing of every endpoint, briefly (issue 9): the properties
 * live in test/helpers/fuzz.ts; test/slow/fuzz.test.ts runs them far longer.
 */
import { defineFuzzSuite } from '../helpers/fuzz.js';

defineFuzzSuite({ numRuns: 40, hashingRuns: 8 });
