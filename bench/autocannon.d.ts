/** The part of autocannon's programmatic API the benchmark uses (the package ships no types). */
declare module 'autocannon' {
  export interface Request {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string;
    setupRequest?: (request: Request, context: Record<string, unknown>) => Request;
  }
  /** One connection; 'headers' carries the raw response headers, names and values alternating. */
  export interface Client {
    on(event: 'headers', listener: (info: { statusCode: number; headers: (string | Buffer)[] }) => void): void;
  }
  export interface Options {
    url: string;
    connections?: number;
    duration?: number;
    pipelining?: number;
    timeout?: number;
    headers?: Record<string, string>;
    requests?: Request[];
    setupClient?: (client: Client) => void;
  }
  export interface Histogram {
    average: number;
    mean: number;
    total: number;
    p50: number;
    p90: number;
    p99: number;
    max: number;
  }
  export interface Result {
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
    mismatches: number;
    '2xx': number;
    statusCodeStats: Record<string, { count: number }>;
    latency: Histogram;
    requests: Histogram & { sent: number };
  }
  /** The running load: a promise of its result that also reports each failed request (a socket error or a timeout). */
  export interface Instance extends Promise<Result> {
    on(event: 'reqError', listener: (error: Error & { code?: string }) => void): void;
  }
  function autocannon(options: Options): Instance;
  export default autocannon;
}
