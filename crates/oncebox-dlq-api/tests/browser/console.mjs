// Drives the DLQ console in headless Chromium against a running API (started by
// tests/console_browser.rs over a real database): a wrong token shows an error and no data; the
// right one lists, filters, opens an event, retries one, refuses a delete that was not confirmed and
// deletes one that was. Prints the ids it retried and deleted as one JSON line for the Rust side to
// check in the database; any failed step exits non-zero.
import { chromium } from 'playwright-core';

const [base, token, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.ONCEBOX_CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
});
const fail = (message) => { throw new Error(message); };
const STEP = { timeout: 20_000 };

try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  page.on('pageerror', (error) => problems.push(String(error)));
  await page.goto(`${base}/console`);

  // A wrong token: an error, and not one row of data.
  await page.fill('#token', 'not-the-right-token-0000');
  await page.click('#login button');
  await page.waitForSelector('#error:not([hidden])', STEP);
  const refusal = await page.textContent('#error');
  if (!refusal.includes('401')) fail(`a wrong token showed '${refusal}', not a 401`);
  if ((await page.locator('#rows tr').count()) !== 0) fail('rows are shown with a wrong token');

  // The right token: the first page of every event.
  await page.fill('#token', token);
  await page.click('#login button');
  await page.waitForSelector('#rows tr', STEP);
  await page.waitForSelector('#error[hidden]', { ...STEP, state: 'attached' });
  const pageInfo = await page.textContent('#page-info');
  if (!/^1–20 of 25$/.test(pageInfo)) fail(`page info '${pageInfo}'`);
  await page.click('#next');
  await page.waitForFunction(() => document.querySelector('#page-info').textContent === '21–25 of 25', null, STEP);

  // Filter by type.
  await page.fill('#event-type', 'payment-failed');
  await page.click('#filters button');
  await page.waitForFunction(() => {
    const types = [...document.querySelectorAll('#rows tr td:nth-child(3)')].map((td) => td.textContent);
    return types.length === 5 && types.every((type) => type === 'payment-failed');
  }, null, STEP);

  // Open one: its payload pretty-printed, its last error and attempts.
  const retried = await page.locator('#rows tr').first().getAttribute('data-id');
  await page.locator('#rows tr').first().click();
  await page.waitForSelector('#detail:not([hidden])', STEP);
  if ((await page.textContent('#detail-id')) !== retried) fail('the detail shows another event');
  const payload = await page.textContent('#detail-payload');
  if (!payload.includes('\n  "amount"')) fail(`the payload is not pretty-printed: ${payload}`);
  if ((await page.textContent('#detail-error')) !== 'broker said no') fail('the last error is not shown');
  await page.screenshot({ path: screenshot, fullPage: true });

  // Retry it: the transfer job takes it out of the DLQ, so it leaves the list.
  await page.click('#retry-one');
  await page.waitForSelector('#detail', { ...STEP, state: 'hidden' });
  for (let round = 0; ; round += 1) {
    if ((await page.locator(`#rows tr[data-id="${retried}"]`).count()) === 0) break;
    if (round > 100) fail(`retried event ${retried} never left the DLQ`);
    await page.waitForTimeout(200);
    await page.click('#filters button');
  }

  // A delete that is not confirmed deletes nothing; a confirmed one deletes.
  const deleted = await page.locator('#rows tr').first().getAttribute('data-id');
  await page.locator('#rows tr').first().click();
  await page.waitForSelector('#detail:not([hidden])', STEP);
  let asked = '';
  page.once('dialog', (dialog) => { asked = dialog.message(); dialog.dismiss(); });
  await page.click('#delete-one');
  await page.waitForTimeout(300);
  if (!asked.includes(deleted)) fail(`the delete asked '${asked}'`);
  if ((await page.locator(`#rows tr[data-id="${deleted}"]`).count()) !== 1) fail('a dismissed delete deleted');
  page.once('dialog', (dialog) => dialog.accept());
  await page.click('#delete-one');
  await page.waitForFunction((id) => !document.querySelector(`#rows tr[data-id="${id}"]`), deleted, STEP);
  const left = await page.locator('#rows tr').count();
  if (left !== 3) fail(`${left} payment-failed events listed after one retry and one delete, not 3`);
  if (problems.length) fail(`script errors on the page: ${problems.join('; ')}`);
  console.log(JSON.stringify({ retried, deleted }));
} finally {
  await browser.close();
}
