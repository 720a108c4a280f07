// How the browser tests start Debian's Chromium (headless, no sandbox, no GPU).
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const LAUNCH = {
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
};
