// A self-signed P-256 certificate for the browser tests' TLS servers, made
// with the openssl CLI: { cert, key, ca, spki } in `dir`. `name`, where
// given, is a DNS name the certificate holds besides 127.0.0.1; spki is the
// base64 SHA-256 of its public key (what Chromium's
// --ignore-certificate-errors-spki-list takes); ca is the certificate itself.
import { spawnSync } from 'node:child_process';
import { chmodSync } from 'node:fs';
import { join } from 'node:path';

export const hasOpenssl = spawnSync('openssl', ['version']).status === 0;

function sh(cmd) {
  const r = spawnSync('sh', ['-c', cmd], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd}: ${r.stderr}`);
  return r.stdout.trim();
}

export function makeCertificate(dir, name = '') {
  const cert = join(dir, 'cert.pem'), key = join(dir, 'key.pem');
  const cn = name || '127.0.0.1';
  const alt = name ? `DNS:${name},IP:127.0.0.1` : 'IP:127.0.0.1';
  sh(`openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 ` +
     `-subj /CN=${cn} -addext subjectAltName=${alt} -keyout ${key} -out ${cert} 2>/dev/null`);
  chmodSync(key, 0o600);
  const spki = sh(`openssl x509 -pubkey -noout -in ${cert} | openssl pkey -pubin -outform der | ` +
                  `openssl dgst -sha256 -binary | base64`);
  return { cert, key, ca: cert, spki };
}
