/**
 * Work that catches up on all there is so far (numbering events, a shared read, a poll), one pass at a time: a pass
 * asked for while one runs runs once more after it, so passes never overlap and no request is lost. A pass answers
 * true when more is there at once; `more` says whether another may follow; one that throws ends them, to `onError`.
 */
export interface Serial {
  /** Resolves once a pass that serves this call is over; `ask` false: the pass running serves it. */
  run(ask?: boolean): Promise<void>;
  /** The passes running now, if any. */
  current(): Promise<void> | undefined;
}

export function serial(pass: () => Promise<boolean>, more: () => boolean, onError?: (error: unknown) => void): Serial {
  let running: Promise<void> | undefined;
  let again = false;

  /** Passes until one finds nothing more and none was asked for meanwhile. */
  async function passes(): Promise<void> {
    try {
      let fullPass: boolean;
      do {
        again = false;
        fullPass = await pass();
      } while ((fullPass || again) && more());
    } finally {
      running = undefined;
    }
  }

  function run(ask = true): Promise<void> {
    if (running) {
      again ||= ask;
      return running;
    }
    running = passes().catch(onError);
    return running;
  }

  return { run, current: () => running };
}
