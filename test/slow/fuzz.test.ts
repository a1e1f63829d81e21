/**
 * The fuzz properties of test/helpers/fuzz.ts with a long budget (npm run
 * test:slow): each property sees hundreds of generated requests.
 */
import { defineFuzzSuite } from '../helpers/fuzz.js';

defineFuzzSuite({ numRuns: 600, hashingRuns: 60 });
