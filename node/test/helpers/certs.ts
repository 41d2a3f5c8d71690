// Throwaway self-signed certificates, made per test run with openssl so no
// private key is ever committed.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serverBinary } from "./real-server.js";
import { requireTool } from "./system-tools.js";

export interface TestCert {
  key: Buffer;
  cert: Buffer;
  /** The PEM files, for a server that reads them (`monolock serve --tls-cert`). */
  keyPath: string;
  certPath: string;
}

/** Creates a self-signed P-256 certificate for 127.0.0.1 and localhost. */
export function makeSelfSignedCert(commonName: string): TestCert {
  const dir = mkdtempSync(join(tmpdir(), "monolock-cert-"));
  const keyPath = join(dir, "key.pem");
  const certPath = join(dir, "cert.pem");
  execFileSync(
    requireTool("openssl"),
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-keyout",
      keyPath,
      "-out",
      certPath,
      "-days",
      "2",
      "-subj",
      `/CN=${commonName}`,
      "-addext",
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  return { key: readFileSync(keyPath), cert: readFileSync(certPath), keyPath, certPath };
}

/** A CA, a server certificate for 127.0.0.1 and localhost and one client
 * certificate per common name, made by `monolock certs` in a fresh
 * directory, which it returns (ca.crt, server.crt/.key, NAME.crt/.key). */
export function makeMonolockPki(clientNames: readonly string[]): string {
  const dir = mkdtempSync(join(tmpdir(), "monolock-pki-"));
  const certs = (...args: string[]) =>
    execFileSync(serverBinary(), ["certs", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  certs("init", dir);
  certs("server", "--dir", dir, "--host", "127.0.0.1", "--host", "localhost");
  for (const cn of clientNames) certs("client", "--dir", dir, "--cn", cn);
  return dir;
}
