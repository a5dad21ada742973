// Drives weir daemon's web page in Debian's Chromium (headless, fresh
// profile, no request leaves for anywhere but the server under test).
// Env: WEIR_URL (http://127.0.0.1:PORT/), WEIR_TORRENT (a .torrent to
// upload), WEIR_TORRENT_NAME, WEIR_EXPECT_ROWS (transfers already there),
// WEIR_PROFILE (an empty directory), WEIR_FIRST_NAME / WEIR_FIRST_STATE
// (what row 1 reads; the fake backend's synthetic rows by default). Prints one line per step; exits non-zero
// with the reason on the first failed check.
import { chromium } from 'playwright-core';

const base = process.env.WEIR_URL;
const torrent = process.env.WEIR_TORRENT;
const torrentName = process.env.WEIR_TORRENT_NAME;
const expectRows = Number(process.env.WEIR_EXPECT_ROWS);
const profile = process.env.WEIR_PROFILE;
const origin = new URL(base).origin;
const firstName = process.env.WEIR_FIRST_NAME || 'synthetic transfer 000001';
const firstState = process.env.WEIR_FIRST_STATE || 'Downloading';

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run',
    '--disable-default-apps', '--disable-extensions', '--disable-domain-reliability',
    '--no-pings', '--metrics-recording-only'],
  timeout: 60000,
});
const blocked = [];
await context.route('**/*', (route) => {
  const url = route.request().url();
  if (url.startsWith(origin + '/')) return route.continue();
  blocked.push(url);
  return route.abort();
});
try {
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(20000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));

  const t0 = Date.now();
  await page.goto(base);
  await page.waitForFunction((n) => document.querySelectorAll('#rows tr').length === n, expectRows);
  const listMs = Date.now() - t0;
  const applyMs = await page.evaluate(() => window.weirLastApplyMs);
  console.log(`listed ${expectRows} transfers: page ready in ${listMs} ms, rows built in ${applyMs.toFixed(1)} ms`);
  const first = await page.textContent('#rows tr[data-id="1"] td.name');
  check(first === firstName, `first row name: ${first}`);
  const pct = await page.textContent('#rows tr[data-id="1"] .bar b');
  check(/^\d+\.\d%$/.test(pct), `progress text: ${pct}`);
  const state = await page.textContent('#rows tr[data-id="1"] td.state');
  check(state === firstState, `first row state: ${state}`);

  // Add a .torrent by upload.
  await page.setInputFiles('#torrent-file', torrent);
  const added = page.locator('#rows tr', { hasText: torrentName });
  await added.waitFor();
  const addedId = await added.getAttribute('data-id');
  check((await page.textContent('#message')).includes(torrentName), 'add message');
  console.log(`added ${torrentName} as ${addedId}`);

  // Its files: untick the first, and the server says so when asked again.
  await page.click(`#rows tr[data-id="${addedId}"] button.files`);
  const box = page.locator('#file-list input[type=checkbox]').first();
  await box.waitFor();
  check(await box.isChecked(), 'a new transfer wants its first file');
  const nFiles = await page.locator('#file-list input[type=checkbox]').count();
  await box.uncheck();
  await page.waitForFunction((n) => document.getElementById('message').textContent
    .endsWith(`${n - 1} of ${n} files wanted`), nFiles);
  await page.click('#files-close');
  await page.click(`#rows tr[data-id="${addedId}"] button.files`);
  await page.waitForFunction(() => {
    const b = document.querySelector('#file-list input[type=checkbox]');
    return b && !b.checked;
  });
  await page.click('#files-close');
  console.log(`unticked file 0 of ${nFiles} and read it back`);

  // Pause one.
  await page.click('#rows tr[data-id="2"] button.pause');
  await page.waitForFunction(() =>
    document.querySelector('#rows tr[data-id="2"] td.state').textContent === 'Stopped');
  await page.waitForSelector('#rows tr[data-id="2"] button.resume');
  console.log('paused 2');
  // An update with nothing changed touches no cell: it is cheap.
  await page.evaluate(() => refresh(true));
  const quietMs = await page.evaluate(() => window.weirLastApplyMs);
  console.log(`full refresh of ${expectRows + 1} unchanged rows applied in ${quietMs.toFixed(1)} ms`);

  // Remove one without its data, and the uploaded one with it.
  await page.click('#rows tr[data-id="1"] button.remove');
  await page.waitForSelector('#rows tr[data-id="1"]', { state: 'detached' });
  console.log('removed 1');
  page.once('dialog', (d) => d.accept());
  await page.click(`#rows tr[data-id="${addedId}"] button.remove-data`);
  await page.waitForSelector(`#rows tr[data-id="${addedId}"]`, { state: 'detached' });
  console.log(`removed ${addedId} with data`);

  // Global caps.
  await page.fill('#cap-down', '123');
  await page.check('#cap-down-on');
  await page.fill('#cap-up', '45');
  await page.check('#cap-up-on');
  await page.click('#caps-apply');
  await page.waitForFunction(() => document.getElementById('message').textContent === 'Caps applied');
  console.log('caps applied');

  const rowsLeft = await page.locator('#rows tr').count();
  check(rowsLeft === expectRows - 1, `rows left: ${rowsLeft}`);
  check(errors.length === 0, `page errors: ${errors.join('; ')}`);
  check(blocked.length === 0, `requests off the server: ${blocked.join(', ')}`);
  console.log('OK');
} finally {
  await context.close();
}
