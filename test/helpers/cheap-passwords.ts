/**
 * Set-up of every test file on a database: the integration files sign up
 * hundreds of users, and scrypt at the production cost would be most of the
 * suite's CPU. Hashes name their own parameters, so the service verifies
 * these as it does any; test/unit/passwords.test.ts holds the production cost.
 */
import { PASSWORD_COST } from '../../src/security.js';

Object.assign(PASSWORD_COST, { N: 2 ** 10, r: 8, p: 1 });
