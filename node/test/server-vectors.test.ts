// spec/vectors/frames.json server_invalid: raw bytes to the real server, each
// case on a fresh server, and the exact replies it must send.
import assert from "node:assert/strict";
import * as net from "node:net";
import { describe, test } from "node:test";
import { FrameDecoder, type ServerFrame } from "../src/frames.js";
import { RealServer } from "./helpers/real-server.js";
import { hex, loadSpec } from "./helpers/spec.js";

interface Reply {
  type: string;
  code?: number;
  reason?: string;
}
interface Frames {
  server_invalid: { cases: { desc: string; send_hex: string; replies: Reply[]; then?: string }[] };
}

const spec = loadSpec<Frames>("vectors/frames.json");

/** Sends bytes, collects `count` frames, then reports whether the server closed. */
async function exchange(address: string, bytes: Uint8Array, count: number) {
  const [host, port] = [
    address.slice(0, address.lastIndexOf(":")),
    Number(address.slice(address.lastIndexOf(":") + 1)),
  ];
  const socket = net.connect({ host, port });
  socket.setNoDelay(true);
  const decoder = new FrameDecoder();
  const frames: ServerFrame[] = [];
  let extra = 0;
  let gotFrames: () => void = () => {};
  const framesDone = new Promise<void>((r) => {
    gotFrames = r;
  });
  const closed = new Promise<void>((r) => {
    socket.on("end", () => r());
    socket.on("close", () => r());
  });
  socket.on("error", () => {});
  socket.on("data", (chunk: Buffer) => {
    if (frames.length >= count) {
      extra += chunk.length;
      return;
    }
    frames.push(...decoder.push(chunk));
    if (frames.length >= count) gotFrames();
  });
  socket.write(bytes);
  const limit = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 5000).unref());
  assert.notEqual(await Promise.race([framesDone, closed.then(() => undefined), limit]), "timeout", "replies in time");
  return { socket, frames, closed, limit, extra: () => extra };
}

describe("server_invalid vectors against the real server", () => {
  for (const c of spec.server_invalid.cases) {
    test(c.desc, async () => {
      const server = await RealServer.start();
      try {
        const { socket, frames, closed, limit, extra } = await exchange(
          server.address,
          hex(c.send_hex),
          c.replies.length,
        );
        assert.equal(
          frames.length,
          c.replies.length,
          `frames ${JSON.stringify(frames, (_k, v) => (typeof v === "bigint" ? String(v) : v))}`,
        );
        c.replies.forEach((want, i) => {
          const got = frames[i];
          assert.equal(got?.type, want.type.toLowerCase(), `reply ${i}`);
          if (got?.type === "error") {
            assert.equal(got.code, want.code, `reply ${i} code`);
            if (want.reason !== undefined) assert.equal(got.reason, want.reason, `reply ${i} reason`);
          }
        });
        if (c.then === "open") {
          assert.equal(socket.destroyed, false, "connection stays open");
        } else {
          assert.notEqual(await Promise.race([closed, limit]), "timeout", "server closes after the last reply");
          assert.equal(extra(), 0, "nothing after the last reply");
        }
        socket.destroy();
      } finally {
        await server.stop();
      }
    });
  }
});
