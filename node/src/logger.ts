/**
 * Where the client tells what it does. Each method gets one string that
 * starts with `"monolock: "`, so `console`, pino, winston and bunyan loggers
 * all fit as they are.
 *
 * - `warn`: an attempt of an acquisition failed and the client tries again
 *   (with the error and what comes next), or drops a server that does not
 *   speak monolock.
 * - `info`: a held lock was lost.
 * - `debug`: connecting, queued, acquired, released.
 */
export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
}

/** Logs through `logger`, if any. A logger that throws never breaks the client. */
export function log(logger: Logger | undefined, level: keyof Logger, message: string): void {
  if (logger === undefined) return;
  try {
    logger[level](message);
  } catch {
    // Nothing sensible to do: the logger is the place errors would go.
  }
}
