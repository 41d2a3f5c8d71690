/**
 * Which TLS failures are certificate problems (spec/constants.json,
 * client_defaults.tls_certificate_rule). A refused certificate is refused
 * again on the next try, so an acquisition does not ask that server again,
 * as for a server that does not speak monolock.
 */

import type * as tls from "node:tls";

/** Whose certificate was refused: `"server"`'s by this client, or this `"client"`'s by the server. */
export type CertificateSide = "server" | "client";

/**
 * OpenSSL's verification errors (and Node's name check) when this client
 * refuses the server's certificate. Node also records them on the socket's
 * `authorizationError`, which catches any code missing here.
 */
const SERVER_CERT_CODES = new Set([
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_REVOKED",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "CERT_SIGNATURE_FAILURE",
  "CERT_CHAIN_TOO_LONG",
  "INVALID_CA",
  "INVALID_PURPOSE",
  "PATH_LENGTH_EXCEEDED",
  "HOSTNAME_MISMATCH",
  "ERROR_IN_CERT_NOT_BEFORE_FIELD",
  "ERROR_IN_CERT_NOT_AFTER_FIELD",
  "UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY",
]);

/**
 * The alerts a server sends when it refuses this client's certificate, as
 * Node names them: bad_certificate (42), unsupported_certificate (43),
 * certificate_revoked (44), certificate_expired (45), certificate_unknown
 * (46), unknown_ca (48), access_denied (49), certificate_required (116).
 */
const CLIENT_CERT_ALERT_CODES = new Set([
  "ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE",
  "ERR_SSL_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
  "ERR_SSL_SSLV3_ALERT_CERTIFICATE_REVOKED",
  "ERR_SSL_SSLV3_ALERT_CERTIFICATE_EXPIRED",
  "ERR_SSL_SSLV3_ALERT_CERTIFICATE_UNKNOWN",
  "ERR_SSL_TLSV1_ALERT_UNKNOWN_CA",
  "ERR_SSL_TLSV1_ALERT_ACCESS_DENIED",
  "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED",
]);

/**
 * Whether a TLS socket's error is a certificate problem, and whose.
 * `handshakeDone`: the socket had emitted `secureConnect` (in TLS 1.3 the
 * server's refusal of this client's certificate arrives after it, on the
 * first read).
 */
export function certificateProblem(
  err: Error & { code?: unknown },
  socket: tls.TLSSocket,
  handshakeDone: boolean,
): CertificateSide | undefined {
  const code = typeof err.code === "string" ? err.code : "";
  if (CLIENT_CERT_ALERT_CODES.has(code)) return "client";
  if (handshakeDone) return undefined;
  if (SERVER_CERT_CODES.has(code) || socket.authorizationError) return "server";
  return undefined;
}

/** The hint that ends a certificate problem's message. */
export function certificateHint(side: CertificateSide): string {
  return side === "server"
    ? "the server's certificate is not trusted: check the CA file and the server name"
    : "the server refused this client's certificate: give a client certificate that its CA signs";
}
