// Bundle the page into dist/: app.js, app.css and index.html.  Run by
// `npm run build` (scripts/setup.sh does it); dist/ is not committed.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";

const here = new URL(".", import.meta.url).pathname;
const dist = `${here}dist`;
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
await build({
  entryPoints: { app: `${here}src/main.js` },
  bundle: true,
  minify: true,
  sourcemap: false,
  target: ["chrome100", "firefox100"],
  outdir: dist,
  logLevel: "warning",
  legalComments: "linked",
});
copyFileSync(`${here}src/index.html`, `${dist}/index.html`);
console.log(`dashboard built in ${dist}`);
