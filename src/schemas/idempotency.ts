/** A create's contracts (docs/api.md §8): Idempotency-Key; the 201 with Location and ETag (use-cases/create-once.ts). */
import { Type, type TRefUnsafe, type TSchema } from '@sinclair/typebox';
import { ETag } from './common.js';
import { optionalHeaders } from './conditional.js';

const IdempotencyKey = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[\\x20-\\x7E]*$',
  'x-errorMessage': 'must be printable ASCII characters',
  description:
    'makes a retry safe: the same key with the same body within 24 h returns the first response (Idempotent-Replayed: true) ' +
    'and creates nothing; with another body it is a 422; while the first request runs, a 409. Keys are per user ' +
    '(per token owner; sign-ups without a token share one anonymous scope). 1–255 printable ASCII characters.',
});

export const IdempotentHeaders = optionalHeaders({ 'idempotency-key': IdempotencyKey });

/** A created resource: 201 with Location and ETag; a replay of it also says so. */
export const Created = <T extends TSchema>(schema: T, description: string): TRefUnsafe<T> =>
  Type.Ref(schema, {
    description,
    headers: {
      Location: { type: 'string', pattern: '^[!-~]+$', maxLength: 2048, description: 'the URL of the new resource' },
      ETag,
      'Idempotent-Replayed': {
        type: 'string',
        enum: ['true'],
        description:
          'present when this is the stored first response to an earlier request with the same Idempotency-Key',
      },
    },
  });
