/* libFuzzer target for the wire validator, both directions: the input is split into up to
 * three frames by its first two bytes (frame sizes), so the fuzzer explores frame counts and
 * sizes as well as header contents. The frames are decoded as a request (ps_wire_decode) and
 * checked as a reply (ps_wire_check_reply) to a request built mostly from the header itself,
 * so that well-formed replies are reachable; the high bit of the second byte swaps in another
 * requested op. Build with -DEMBER_FUZZ=ON (clang); run as
 *   build-fuzz/proto/fuzz_wire -max_total_time=60 */
#include <stdint.h>
#include <string.h>

#include "ps_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t a = data[0], b = data[1];
  data += 2;
  size -= 2;
  ps_frame f[3];
  size_t nf = 0;
  size_t la = a < size ? a : size;
  f[nf].data = data;
  f[nf++].size = la;
  size_t rest = size - la;
  if (rest) {
    size_t lb = (b * 8) < rest ? (b * 8) : rest;
    f[nf].data = data + la;
    f[nf++].size = lb;
    if (rest - lb) {
      f[nf].data = data + la + lb;
      f[nf++].size = rest - lb;
    }
  }
  ps_msg m;
  ps_error err;
  if (ps_wire_decode(f, nf, &m, &err) == PS_OK) {
    /* Touch every byte the decoder promised, so ASan sees an over-read if sizes lie. */
    volatile uint64_t acc = 0;
    for (size_t i = 0; i < m.nkeys; i++) acc += m.keys[i];
    const uint8_t *v = m.values;
    for (size_t i = 0; i < m.nvalues * m.value_size; i++) acc += v[i];
    (void)acc;
    ps_msg_clear(&m);
  }
  Ember__Header *h = ps_wire_header_unpack(&f[0]);
  if (h) {
    ps_wire_expect want = {h->op, h->table_id, h->count, h->dim, h->value_type};
    if (b & 0x80) want.op = (Ember__Op)(b & 0x0f);
    if (ps_wire_check_reply(h, f, nf, &want, NULL) == PS_OK && nf == 2) {
      /* A good reply with a bulk frame is a PULL reply: read every row it promised. */
      volatile uint64_t acc = 0;
      const uint8_t *v = f[1].data;
      size_t bytes = (size_t)h->count * h->dim * ps_wire_value_size(h->value_type);
      for (size_t i = 0; i < bytes; i++) acc += v[i];
      (void)acc;
    }
    ember__header__free_unpacked(h, NULL);
  }
  return 0;
}
