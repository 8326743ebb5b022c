/* The wire's enums (include/dpm/wire.h, daemon/engine/dtype_wire.h): the
 * proto lists hold exactly the C lists, under the same names and numbers;
 * the bytes are those of the uint32 fields they replaced; a value from a
 * newer peer reads as DPM_INTERNAL (status) or is refused (dtype). */
#include <ctype.h>
#include <stdint.h>

#include "dpm/wire.h"
#include "engine/dtype_wire.h"
#include "test.h"

TEST(wire_status_list_matches) {
  const ProtobufCEnumDescriptor *e = &dpm__status__descriptor;
  CHECK_INT(e->n_values, DPM_STATUS_COUNT); /* no STATUS_ value without a dpm_status */
  for (int s = 0; s < DPM_STATUS_COUNT; s++) {
    char want[64];
    snprintf(want, sizeof want, "STATUS_%s", dpm_status_name((dpm_status)s));
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(e, s);
    CHECK(v && !strcmp(v->name, want));
    CHECK_INT(dpm_status_to_wire((dpm_status)s), s);
    CHECK_INT(dpm_status_from_wire(dpm_status_to_wire((dpm_status)s)), s);
  }
}

TEST(wire_status_unknown_reads_internal) {
  CHECK_INT(dpm_status_from_wire((Dpm__Status)DPM_STATUS_COUNT), DPM_INTERNAL);
  CHECK_INT(dpm_status_from_wire((Dpm__Status)99), DPM_INTERNAL);
  CHECK_INT(dpm_status_to_wire(DPM_STATUS_COUNT), DPM__STATUS__STATUS_INTERNAL);
  /* a newer daemon's answer (status 99) still decodes, and reads as INTERNAL */
  const uint8_t newer[] = {0x08, 0x07, 0x10, 0x63, 0x1a, 0x02, 'h', 'i'};
  Dpm__Response *r = dpm__response__unpack(NULL, sizeof newer, newer);
  CHECK(r);
  int ok = dpm_status_from_wire(r->status) == DPM_INTERNAL && r->id == 7 &&
           !strcmp(r->message, "hi");
  dpm__response__free_unpacked(r, NULL);
  CHECK(ok);
}

TEST(wire_status_bytes_unchanged) {
  /* status was `required uint32 status = 2`: field 2, varint */
  Dpm__Response r = DPM__RESPONSE__INIT;
  r.has_id = 1;
  r.id = 5;
  r.status = dpm_status_to_wire(DPM_NOT_FOUND);
  uint8_t buf[16];
  size_t n = dpm__response__pack(&r, buf);
  const uint8_t want[] = {0x08, 0x05, 0x10, 0x04};
  CHECK_INT(n, sizeof want);
  CHECK(!memcmp(buf, want, sizeof want));
}

TEST(wire_dtype_list_matches) {
  const ProtobufCEnumDescriptor *e = &dpm__dtype__descriptor;
  CHECK_INT(e->n_values, DPM_DTYPE_COUNT);
  for (int t = 0; t < DPM_DTYPE_COUNT; t++) {
    char want[32];
    int n = snprintf(want, sizeof want, "DTYPE_%s", dpm_dtype_name((dpm_dtype)t));
    for (int i = 6; i < n; i++) want[i] = (char)toupper((unsigned char)want[i]);
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(e, t);
    CHECK(v && !strcmp(v->name, want));
    dpm_dtype back = DPM_DTYPE_COUNT;
    CHECK_INT(dpm_dtype_from_wire(dpm_dtype_to_wire((dpm_dtype)t), &back), 0);
    CHECK_INT(back, t);
  }
  dpm_dtype out = DPM_F32;
  CHECK_INT(dpm_dtype_from_wire((Dpm__DType)DPM_DTYPE_COUNT, &out), -1);
  CHECK_INT(dpm_dtype_from_wire((Dpm__DType)7, &out), -1);
  /* the bytes of `required uint32 dtype = 2`: field 2, varint */
  Dpm__TensorProto tp = DPM__TENSOR_PROTO__INIT;
  tp.name = "w";
  tp.dtype = dpm_dtype_to_wire(DPM_I64);
  uint8_t buf[16];
  size_t n = dpm__tensor_proto__pack(&tp, buf);
  const uint8_t want[] = {0x0a, 0x01, 'w', 0x10, 0x02};
  CHECK_INT(n, sizeof want);
  CHECK(!memcmp(buf, want, sizeof want));
}
