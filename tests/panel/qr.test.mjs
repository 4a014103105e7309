// qr.js (the TOTP enrolment's QR code) under `node --test`: the standard's worked
// values; tests/test_auth_qr.py decodes its symbols with a real decoder (zbarimg).
import { test } from 'node:test';
import assert from 'node:assert/strict';

const PANEL = process.env.PANEL_MODULES;
const qr = await import(`${PANEL}/qr.js`);

test('Reed-Solomon: the EC codewords of the standard\'s 1-M example ("01234567")', () => {
  const data = [0x10, 0x20, 0x0c, 0x56, 0x61, 0x80, 0xec, 0x11, 0xec, 0x11, 0xec, 0x11,
    0xec, 0x11, 0xec, 0x11];
  assert.deepEqual(qr.rsRemainder(data, qr.rsDivisor(10)),
    [0xa5, 0x24, 0xd4, 0xc1, 0xed, 0x36, 0xc7, 0x87, 0x2c, 0x55]);
});

test('format information for level M: BCH(15,5) masked with 101010000010010', () => {
  assert.equal(qr.bchFormat(0).toString(2).padStart(15, '0'), '101010000010010');
  assert.equal(qr.bchFormat(7).toString(2).padStart(15, '0'), '100101010100000');
});

test('the version grows with the text and stops at 10', () => {
  assert.equal(qr.encodeQr('hi').version, 1);
  assert.equal(qr.encodeQr('x'.repeat(14)).version, 1); // 1-M holds 14 bytes
  assert.equal(qr.encodeQr('x'.repeat(15)).version, 2);
  const uri = 'otpauth://totp/qledge:admin?secret=' + 'A'.repeat(32) +
    '&issuer=qledge&algorithm=SHA1&digits=6&period=30';
  assert.equal(qr.encodeQr(uri).version, 7); // 115 bytes: 6-M holds 106
  assert.equal(qr.encodeQr('x'.repeat(213)).version, 10);
  assert.throws(() => qr.encodeQr('x'.repeat(214)), RangeError);
});

test('finder patterns at three corners, timing lines, the dark module', () => {
  const { size, dark } = qr.encodeQr('otpauth://totp/x?secret=ABC');
  for (const [cx, cy] of [[3, 3], [size - 4, 3], [3, size - 4]]) {
    assert.equal(dark[cy][cx], true);
    assert.equal(dark[cy - 2][cx], false);
    assert.equal(dark[cy - 3][cx - 3], true);
  }
  for (let i = 8; i < size - 8; i += 1) assert.equal(dark[6][i], i % 2 === 0);
  assert.equal(dark[size - 8][8], true);
});
