// ESLint: the recommended rules of ESLint and typescript-eslint, with the
// type-aware ones that catch real bugs in async server code (floating and
// misused promises, awaiting non-promises). The stylistic type-checked set is
// left out: tsc's strict mode already covers what it would add here.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  // test/fixtures/typed-consumer/: compiled against types generated at test time (typed-consumer.test.ts), none here.
  {
    ignores: [
      'dist/',
      'node_modules/',
      'bench/out/',
      'bench/peers/',
      'coverage/',
      '.data/',
      'test/fixtures/typed-consumer/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/require-await': 'off',
      // import('x') in a type position is how a lazily loaded module is typed.
      '@typescript-eslint/consistent-type-imports': ['error', { disallowTypeAnnotations: false }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The application's code reads as a reviewer needs it: what an exported function gives back is written where it
    // is declared, not inferred from its body, and a choice between more than two things is an if/else.
    files: ['src/**'],
    rules: {
      '@typescript-eslint/explicit-module-boundary-types': 'error',
      'no-nested-ternary': 'error',
    },
  },
  {
    // Tests read arbitrary JSON back and build hostile input on purpose.
    files: ['test/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off', 'no-control-regex': 'off' },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      globals: { console: 'readonly', process: 'readonly' },
    },
  },
);
