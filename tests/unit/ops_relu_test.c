/* Relu: the reference op of the harness. */
#include "optest.h"
#include "test.h"

TEST(op_relu_forward) {
  const float x[] = {-1.5f, 0.f, 2.f, -0.25f, 3.5f, 1e-3f};
  ot_case c = {
      .op = "Relu", .n_in = 1, .in = {{.shape = ot_f32(2, 2, 3), .f = x}}, .n_out = 1};
  const float want[] = {0, 0, 2, 0, 3.5f, 1e-3f};
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 0));
}

TEST(op_relu_gradcheck) {
  float x[35];
  for (int i = 0; i < 35; i++) x[i] = (i % 2 ? 1.f : -1.f) * (0.1f + 0.05f * (float)i);
  ot_case c = {
      .op = "Relu", .n_in = 1, .in = {{.shape = ot_f32(3, 5, 7, 1), .f = x}}, .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 100), 1e-3);
}

TEST(op_relu_rejects_int_input) {
  ot_case c = {.op = "Relu", .n_in = 1, .in = {{.shape = ot_i32(1, 4)}}, .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "input must be f32"));
}
