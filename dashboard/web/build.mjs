// Bundle the page into dist/: app.js, app.css and index.html (the
// dashboard), report.js and report.css (what `collapsar report` inlines
// into one HTML file, so their libraries' licence notices go inside them).
// Run by `npm run build` (scripts/setup.sh does it); dist/ is not committed.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";

const here = new URL(".", import.meta.url).pathname;
const dist = `${here}dist`;
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
const common = {
  bundle: true,
  minify: true,
  sourcemap: false,
  target: ["chrome100", "firefox100"],
  outdir: dist,
  logLevel: "warning",
};
await build({ ...common, entryPoints: { app: `${here}src/main.js` }, legalComments: "linked" });
await build({ ...common, entryPoints: { report: `${here}src/report.js` }, legalComments: "eof" });
copyFileSync(`${here}src/index.html`, `${dist}/index.html`);
console.log(`dashboard built in ${dist}`);
