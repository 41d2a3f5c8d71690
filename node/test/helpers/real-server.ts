// Starts the real Go server (`monolock serve`) for integration tests.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { packageDir } from "./spec.js";

/** $MONOLOCK_BIN, else ../bin/monolock, built from ../go when missing. */
export function serverBinary(): string {
  const fromEnv = process.env.MONOLOCK_BIN;
  if (fromEnv) return fromEnv;
  const bin = resolve(packageDir, "../bin/monolock");
  if (!existsSync(bin)) {
    execFileSync("go", ["build", "-o", bin, "./cmd/monolock"], { cwd: resolve(packageDir, "../go"), stdio: "inherit" });
  }
  return bin;
}

/** What `monolock serve --ready-file` writes once it listens (docs/operating.md, "The ready file"). */
interface ReadyFile {
  lock_addr: string;
  admin_addr: string; // "" when the admin API is not running
  pid: number;
  version: string;
}

/** How long start waits for the ready file. */
const readyTimeoutMs = 15_000;

/** A running `monolock serve` on 127.0.0.1 with a private data directory. */
export class RealServer {
  private constructor(
    readonly process: ChildProcess,
    private readonly ready: ReadyFile,
    private readonly dir: string,
    private readonly log: () => string,
  ) {}

  /** The lock protocol address, from the ready file. */
  get address(): string {
    return this.ready.lock_addr;
  }

  /** Starts `monolock serve` with `extraArgs` after the listen address and data directory. */
  static async start(extraArgs: readonly string[] = []): Promise<RealServer> {
    const dir = mkdtempSync(join(tmpdir(), "monolock-node-it-"));
    const readyPath = join(dir, "ready.json");
    const args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), ...extraArgs];
    const child = spawn(serverBinary(), [...args, "--ready-file", readyPath], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    let exitCode: number | null | undefined;
    child.once("exit", (code) => {
      exitCode = code;
    });
    const tail = () => stderr.slice(-16_384);
    // The server renames the file into place whole: once it exists, it parses.
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      if (existsSync(readyPath)) {
        const ready = JSON.parse(readFileSync(readyPath, "utf8")) as ReadyFile;
        return new RealServer(child, ready, dir, () => stderr);
      }
      if (exitCode !== undefined) {
        rmSync(dir, { recursive: true, force: true });
        throw new Error(`monolock serve exited with ${exitCode} before it was ready; its stderr:\n${tail()}`);
      }
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        rmSync(dir, { recursive: true, force: true });
        throw new Error(`monolock serve was not ready within ${readyTimeoutMs} ms; its stderr:\n${tail()}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** The admin API's address, from the ready file (start it with `--admin 127.0.0.1:0`). */
  async adminAddress(): Promise<string> {
    if (!this.ready.admin_addr) throw new Error(`the admin API is not running:\n${this.log()}`);
    return this.ready.admin_addr;
  }

  /** The server's stderr so far (for failure messages). */
  get stderr(): string {
    return this.log();
  }

  /** Stops the server with `signal` and waits for it to exit. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    if (this.process.exitCode === null && this.process.signalCode === null) {
      const exited = once(this.process, "exit");
      this.process.kill(signal);
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
