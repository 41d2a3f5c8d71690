// Loads the language-neutral contract from ../spec (relative to node/).
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** node/ — compiled tests live in node/build/test/helpers. */
export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
/** The repository's spec/ directory. */
export const specDir = resolve(packageDir, "../spec");

/** Parses spec/<relative>. */
export function loadSpec<T>(relative: string): T {
  return JSON.parse(readFileSync(resolve(specDir, relative), "utf8")) as T;
}

/** Hex string to bytes. */
export function hex(s: string): Uint8Array {
  return new Uint8Array(Buffer.from(s, "hex"));
}

/** Bytes to hex string. */
export function toHex(b: Uint8Array): string {
  return Buffer.from(b).toString("hex");
}
