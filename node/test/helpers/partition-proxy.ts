// A loopback TCP proxy that can cut every connection through it without
// closing any: once partitioned, bytes read on either side are dropped, as
// a network partition drops them, and the peers see only silence.
import { once } from "node:events";
import * as net from "node:net";

export class PartitionProxy {
  /** Drops every byte from now on, both ways, on old and new connections. */
  partitioned = false;
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    private readonly upstream: { host: string; port: number },
  ) {
    server.on("connection", (down) => this.accept(down));
  }

  /** Listens on 127.0.0.1 and forwards to `upstream` ("host:port"). */
  static async start(upstream: string): Promise<PartitionProxy> {
    const at = upstream.lastIndexOf(":");
    const server = net.createServer();
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    return new PartitionProxy(server, { host: upstream.slice(0, at), port: Number(upstream.slice(at + 1)) });
  }

  /** The proxy's own address. */
  get address(): string {
    const { port } = this.server.address() as net.AddressInfo;
    return `127.0.0.1:${port}`;
  }

  /** Closes every connection through the proxy (both sides see the end), keeping the listener. */
  dropAll(): void {
    for (const s of this.sockets) s.destroy();
  }

  async close(): Promise<void> {
    this.dropAll();
    this.server.close();
    await once(this.server, "close");
  }

  private accept(down: net.Socket): void {
    const up = net.connect(this.upstream);
    for (const s of [down, up]) {
      this.sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => this.sockets.delete(s));
    }
    this.pipe(down, up);
    this.pipe(up, down);
  }

  /** Forwards `from` to `to` unless partitioned; an end crosses only an open link. */
  private pipe(from: net.Socket, to: net.Socket): void {
    from.on("data", (chunk) => {
      if (!this.partitioned) to.write(chunk);
    });
    from.on("close", () => {
      if (!this.partitioned) to.destroy();
    });
  }
}
