// A loopback TCP proxy that keeps what each client sent, to read the TLS
// record layer of it (types and lengths; the contents stay encrypted).
import { once } from "node:events";
import * as net from "node:net";

/** One TLS record's header. */
export interface TlsRecord {
  readonly type: number;
  readonly length: number;
}

/** One connection through the proxy, as its client wrote it. */
export class ProxiedConnection {
  private sent = Buffer.alloc(0);
  /** Resolves when the client's side has ended (FIN, reset or close). */
  readonly clientDone: Promise<void>;

  constructor(down: net.Socket) {
    down.on("data", (chunk: Buffer) => {
      this.sent = Buffer.concat([this.sent, chunk]);
    });
    this.clientDone = new Promise((resolve) => {
      down.once("end", () => resolve());
      down.once("close", () => resolve());
    });
  }

  /** The records the client sent, in order (a cut-off last record is left out). */
  records(): TlsRecord[] {
    const out: TlsRecord[] = [];
    let at = 0;
    while (at + 5 <= this.sent.length) {
      const length = this.sent.readUInt16BE(at + 3);
      if (at + 5 + length > this.sent.length) break;
      out.push({ type: this.sent[at] ?? 0, length });
      at += 5 + length;
    }
    return out;
  }
}

export class RecordProxy {
  readonly connections: ProxiedConnection[] = [];
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    private readonly upstream: { host: string; port: number },
  ) {
    server.on("connection", (down) => this.accept(down));
  }

  /** Listens on 127.0.0.1 and forwards to `upstream` ("host:port"). */
  static async start(upstream: string): Promise<RecordProxy> {
    const at = upstream.lastIndexOf(":");
    const server = net.createServer({ allowHalfOpen: true });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    return new RecordProxy(server, { host: upstream.slice(0, at), port: Number(upstream.slice(at + 1)) });
  }

  /** The proxy's own address. */
  get address(): string {
    const { port } = this.server.address() as net.AddressInfo;
    return `127.0.0.1:${port}`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    this.server.close();
    await once(this.server, "close");
  }

  private accept(down: net.Socket): void {
    this.connections.push(new ProxiedConnection(down));
    const up = net.connect({ ...this.upstream, allowHalfOpen: true });
    for (const s of [down, up]) {
      this.sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => this.sockets.delete(s));
    }
    this.pipe(down, up);
    this.pipe(up, down);
  }

  /** Forwards `from` to `to`: bytes, then a FIN as a FIN and anything else as a close. */
  private pipe(from: net.Socket, to: net.Socket): void {
    from.on("data", (chunk) => to.write(chunk));
    from.on("end", () => to.end());
    from.on("close", () => {
      if (!to.writableEnded) to.destroy();
    });
  }
}
