// When the browser client of a distributed run joins again after its socket
// closed, and after how long: the rules of `dnnlab join --reconnect`
// (src/cli/join_cmd.cpp; docs/distributed.md "Reconnecting"), as pure
// functions the worker asks and a test can read.

// Tries at reconnecting after a lost link, as join's --reconnect: the page's
// `?reconnect=N` (0 to 1000; 0: a lost link ends the client).
export const DEFAULT_TRIES = 10;
export const MAX_TRIES = 1000;

// `?reconnect=` from the page's query string: the number of tries, or a
// message naming the parameter when it is not a whole number 0 to 1000.
export function parseTries(search) {
  const raw = new URLSearchParams(search).get('reconnect');
  if (raw === null) return { tries: DEFAULT_TRIES };
  if (!/^\d{1,4}$/.test(raw) || Number(raw) > MAX_TRIES) {
    return { error: `reconnect=${raw} in the page's URL: a whole number of tries, 0 to ${MAX_TRIES} (0: never)` };
  }
  return { tries: Number(raw) };
}

// The pause before reconnect try k (1-based), in ms: 0.5 s doubling to 10 s,
// each drawn from its upper half (jitter, so that clients cut at once do not
// come back at once). `random` in [0, 1).
export function backoffMs(k, random = Math.random()) {
  const ceiling = Math.min(10_000, 500 * 2 ** Math.min(k - 1, 10));
  return Math.round((0.5 + 0.5 * random) * ceiling);
}

// A WebSocket that ended without a close frame from the server (a reset, an
// end of stream, a refused connection) reports 1006 to the page.
const LOST = 1006;
// The protocol's "try again later": the identity is connected already (the
// server has not yet seen the old link end), or the run is full.
const TRY_AGAIN = 1013;

// What follows a closed socket. `link`: {code, reason (the close reason, or
// the server's error message), welcomed (this socket had a welcome), done
// (the server said the run is over), failed (this page closed it: the core
// refused a frame), timedOut (no welcome in time: this page closed it)};
// `identity`: whether the hello presented one. Returns {next: 'finished' |
// 'closed' | 'retry' | 'refused', why}.
export function afterClose(link, identity) {
  if (link.done) return { next: 'finished', why: '' };
  if (link.failed) return { next: 'closed', why: '' };
  if (link.timedOut) return { next: 'retry', why: 'no welcome within 10 s' };
  // The run's end without the bye seen (a normal close), as join takes it.
  if (link.code === 1000) return { next: 'finished', why: '' };
  if (link.code === LOST) return { next: 'retry', why: link.reason || 'the socket closed without a word from the server (1006)' };
  const reason = link.reason || `closed (${link.code})`;
  if (link.code === TRY_AGAIN) return { next: 'retry', why: reason };
  // The server's word (a refusal, a quarantine, a broken rule) would be
  // said again: never retried.
  if (!link.welcomed && identity) return { next: 'refused', why: reason };
  return { next: 'closed', why: reason };
}
