// Starts the real Go server (`monolock serve`) for integration tests.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
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

/** A running `monolock serve` on 127.0.0.1 with a private data directory. */
export class RealServer {
  private constructor(
    readonly process: ChildProcess,
    readonly address: string,
    private readonly dataDir: string,
    private readonly log: () => string,
  ) {}

  /** Starts `monolock serve` with `extraArgs` after the listen address and data directory. */
  static async start(extraArgs: readonly string[] = []): Promise<RealServer> {
    const dataDir = mkdtempSync(join(tmpdir(), "monolock-node-it-"));
    const args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, ...extraArgs];
    const child = spawn(serverBinary(), args, {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    const address = await new Promise<string>((resolveAddr, reject) => {
      const timer = setTimeout(() => reject(new Error(`server did not start:\n${stderr}`)), 15_000);
      child.stderr?.on("data", (d: Buffer) => {
        stderr += d.toString();
        const m = /msg=listening addr=(\S+)/.exec(stderr);
        if (m?.[1]) {
          clearTimeout(timer);
          resolveAddr(m[1]);
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`server exited with ${code}:\n${stderr}`));
      });
    });
    return new RealServer(child, address, dataDir, () => stderr);
  }

  /** The admin API's address, once the server has logged it (start it with `--admin 127.0.0.1:0`). */
  async adminAddress(): Promise<string> {
    for (let i = 0; i < 150; i++) {
      const m = /msg="admin listening" addr=(\S+)/.exec(this.log());
      if (m?.[1]) return m[1];
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`the admin API did not start within 15 s:\n${this.log()}`);
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
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}
