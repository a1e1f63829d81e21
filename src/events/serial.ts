/**
 * Work that catches up on all there is so far (numbering events, a shared read, a poll), one pass at a time: a pass
 * asked for while one runs runs once more after it, so passes never overlap and no request is lost. A pass answers
 * true when more is there at once; `more` says whether another may follow; one that throws ends them, to `onError`.
 */
export function serial(pass: () => Promise<boolean>, more: () => boolean, onError?: (error: unknown) => void) {
  let running: Promise<void> | undefined;
  let again = false;

  /** Resolves once a pass that serves this call is over; `ask` false: the pass running serves it. */
  function run(ask = true): Promise<void> {
    if (running) {
      again ||= ask;
      return running;
    }
    running = (async () => {
      try {
        do {
          again = false;
        } while (((await pass()) || again) && more());
      } finally {
        running = undefined;
      }
    })().catch(onError);
    return running;
  }

  return { run, current: () => running };
}
