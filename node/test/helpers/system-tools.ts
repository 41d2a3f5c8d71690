// The system tools of scripts/system-tools.tsv: a test finds every program
// from outside the toolchains through requireTool, which fails loudly when
// the program is missing (naming its Debian package and how to install it)
// and also when it is not on the list, so a new machine is never missing one.
import { accessSync, constants, readFileSync } from "node:fs";
import { delimiter, join, resolve } from "node:path";
import { packageDir } from "./spec.js";

/** The list, relative to node/. */
export const systemToolsPath = resolve(packageDir, "../scripts/system-tools.tsv");

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir !== "" && executable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** Returns the path of the listed program `name`, or throws. `list` is for the helper's own tests. */
export function requireTool(name: string, list: string = systemToolsPath): string {
  for (const line of readFileSync(list, "utf8").split("\n")) {
    if (line === "" || line.startsWith("#") || line.startsWith("name\t")) continue;
    const [tool, pkg, path, group] = line.split("\t");
    if (tool !== name) continue;
    if (pkg === undefined || path === undefined || group === undefined) {
      throw new Error(`${list}: a row without 5 tab-separated columns: ${line}`);
    }
    const found = path === "-" ? onPath(name) : executable(path) ? path : undefined;
    if (found === undefined) {
      const how = group === "bench" ? "bash bench/scripts/peers.sh install" : "go run mage.go deps";
      throw new Error(`${name} is not installed (Debian package ${pkg}): run ${how} (apt-get install ${pkg})`);
    }
    return found;
  }
  throw new Error(
    `${name} is not on ${list}: declare it there (name, Debian package, path, group) so that a new machine installs it`,
  );
}
