/* Elementwise ops: Sigmoid, Tanh, Add, Sum, Scale, Copy, StopGradient
 * (Relu has its own file). */
#include "engine/op.h"
#include "optest.h"
#include "test.h"

/* Inputs away from 0 and spread over a few units. */
static void ramp(float *x, int n) {
  for (int i = 0; i < n; i++) x[i] = (i % 2 ? 1.f : -1.f) * (0.1f + 0.07f * (float)i);
}

TEST(op_sigmoid_forward) {
  const float x[] = {0.f, 1.0986123f, -1.0986123f, 40.f, -40.f, -200.f};
  const float want[] = {0.5f, 0.75f, 0.25f, 1.f, 0.f, 0.f};
  ot_case c = {
      .op = "Sigmoid", .n_in = 1, .in = {{.shape = ot_f32(2, 3, 2), .f = x}}, .n_out = 1};
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 1e-6));
}

TEST(op_sigmoid_gradcheck) {
  float x[105];
  ramp(x, 105);
  ot_case c = {.op = "Sigmoid",
               .n_in = 1,
               .in = {{.shape = ot_f32(3, 5, 7, 3), .f = x}},
               .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.in[0] = (ot_input){.shape = ot_f32(1, 13)};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_sigmoid_rejects_int_input) {
  ot_case c = {.op = "Sigmoid", .n_in = 1, .in = {{.shape = ot_i32(1, 4)}}, .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "input must be f32"));
}

TEST(op_tanh_forward) {
  const float x[] = {0.f, 0.69314718f, -0.69314718f, 30.f};
  const float want[] = {0.f, 0.6f, -0.6f, 1.f};
  ot_case c = {
      .op = "Tanh", .n_in = 1, .in = {{.shape = ot_f32(1, 4), .f = x}}, .n_out = 1};
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 1e-6));
}

TEST(op_tanh_gradcheck) {
  float x[66];
  ramp(x, 66);
  ot_case c = {.op = "Tanh",
               .n_in = 1,
               .in = {{.shape = ot_f32(4, 2, 3, 11, 1), .f = x}},
               .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.in[0] = (ot_input){.shape = ot_f32(2, 7, 3)};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_tanh_rejects_int_input) {
  ot_case c = {.op = "Tanh", .n_in = 1, .in = {{.shape = ot_i32(2, 2, 2)}}, .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "input must be f32"));
}

TEST(op_add_forward) {
  const float a[] = {1, 2, 3, -4}, b[] = {0.5f, -2, 10, 4}, want[] = {1.5f, 0, 13, 0};
  ot_case c = {
      .op = "Add",
      .n_in = 2,
      .in = {{.shape = ot_f32(2, 2, 2), .f = a}, {.shape = ot_f32(2, 2, 2), .f = b}},
      .n_out = 1};
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 0));
}

TEST(op_add_gradcheck) {
  ot_case c = {.op = "Add",
               .n_in = 2,
               .in = {{.shape = ot_f32(3, 3, 5, 7)}, {.shape = ot_f32(3, 3, 5, 7)}},
               .n_out = 1,
               .seed = 3};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.in[0].no_grad = 1; /* only the second input's gradient is wanted */
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_add_rejects_shape_mismatch) {
  ot_case c = {.op = "Add",
               .n_in = 2,
               .in = {{.shape = ot_f32(2, 2, 3)}, {.shape = ot_f32(2, 3, 2)}},
               .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE,
                          "input 1 is f32[3,2], input 0 is f32[2,3]: shapes differ"));
}

TEST(op_sum_forward) {
  const float a[] = {1, 2, 3}, b[] = {10, 20, 30}, d[] = {-1, 0.5f, 100};
  const float want[] = {10, 22.5f, 133};
  ot_case c = {.op = "Sum",
               .n_in = 3,
               .in = {{.shape = ot_f32(1, 3), .f = a},
                      {.shape = ot_f32(1, 3), .f = b},
                      {.shape = ot_f32(1, 3), .f = d}},
               .n_out = 1};
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 0));
  c.n_in = 1; /* one input: a copy */
  CHECK(ot_forward_is(&c, c.in[0].shape, a, 0));
}

/* The engine accumulates gradients with Sum writing over its first input;
 * any aliasing must work, across full blocks and a remainder. */
TEST(op_sum_in_place) {
  enum { N = 2500 };
  dpm_shape s = ot_f32(1, N);
  dpm_tensor a = {0}, b = {0};
  CHECK_INT(dpm_tensor_resize(&a, &s), DPM_OK);
  CHECK_INT(dpm_tensor_resize(&b, &s), DPM_OK);
  for (int i = 0; i < N; i++) dpm_f32(&a)[i] = (float)i, dpm_f32(&b)[i] = (float)(3 * i);
  dpm_err err = {0};
  int ran = !ot_run_op("Sum", "", 0, 3, (dpm_tensor *[]){&a, &b, &a}, 1,
                       (dpm_tensor *[]){&a}, &err); /* a = a + b + a */
  int bad = 0;
  for (int i = 0; ran && i < N; i++) bad += dpm_f32(&a)[i] != (float)(5 * i);
  ran = ran && !ot_run_op("Sum", "", 0, 2, (dpm_tensor *[]){&b, &a}, 1,
                          (dpm_tensor *[]){&a}, &err); /* a = b + a */
  for (int i = 0; ran && i < N; i++) bad += dpm_f32(&a)[i] != (float)(8 * i);
  if (!ran) printf("    %s\n", err.msg);
  dpm_tensor_fini(&a);
  dpm_tensor_fini(&b);
  CHECK(ran);
  CHECK_INT(bad, 0);
}

TEST(op_sum_gradcheck) {
  ot_case c = {.op = "Sum",
               .n_in = 3,
               .in = {{.shape = ot_f32(2, 3, 7)},
                      {.shape = ot_f32(2, 3, 7), .no_grad = 1},
                      {.shape = ot_f32(2, 3, 7)}},
               .n_out = 1,
               .seed = 5};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.in[1].no_grad = 0;
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_sum_rejects_shape_mismatch) {
  ot_case c = {
      .op = "Sum",
      .n_in = 3,
      .in = {{.shape = ot_f32(1, 4)}, {.shape = ot_f32(1, 4)}, {.shape = ot_f32(1, 5)}},
      .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE,
                          "input 2 is f32[5], input 0 is f32[4]: shapes differ"));
}

TEST(op_scale_forward) {
  const float x[] = {1, -2, 0.5f, 4}, want[] = {2.5f, -5, 1.25f, 10};
  ot_case c = {.op = "Scale",
               .args = "scale=2.5",
               .n_in = 1,
               .in = {{.shape = ot_f32(1, 4), .f = x}},
               .n_out = 1};
  CHECK(ot_forward_is(&c, c.in[0].shape, want, 0));
  c.args = NULL; /* default scale 1 */
  CHECK(ot_forward_is(&c, c.in[0].shape, x, 0));
}

TEST(op_scale_gradcheck) {
  ot_case c = {.op = "Scale",
               .args = "scale=-0.75",
               .n_in = 1,
               .in = {{.shape = ot_f32(3, 3, 1, 11)}},
               .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_scale_rejects_bad_argument) {
  ot_case c = {.op = "Scale",
               .args = "scale=big",
               .n_in = 1,
               .in = {{.shape = ot_f32(1, 4)}},
               .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SPEC, "argument 'scale' expects a number"));
}

TEST(op_copy_forward) {
  const float x[] = {1, -2, 0.5f, 4, 7, 9};
  ot_case c = {
      .op = "Copy", .n_in = 1, .in = {{.shape = ot_f32(3, 1, 2, 3), .f = x}}, .n_out = 1};
  CHECK(ot_forward_is(&c, c.in[0].shape, x, 0));
}

TEST(op_copy_gradcheck) {
  ot_case c = {.op = "Copy", .n_in = 1, .in = {{.shape = ot_f32(2, 5, 3)}}, .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_copy_rejects_int_input) {
  ot_case c = {.op = "Copy", .n_in = 1, .in = {{.shape = ot_i32(1, 3)}}, .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "input must be f32"));
}

TEST(op_stop_gradient_forward) {
  const float x[] = {3, -1, 0.25f};
  ot_case c = {.op = "StopGradient",
               .n_in = 1,
               .in = {{.shape = ot_f32(1, 3), .f = x}},
               .n_out = 1};
  CHECK(ot_forward_is(&c, c.in[0].shape, x, 0));
  const dpm_op_def *def = dpm_op_find("StopGradient");
  CHECK(def->flags & DPM_OP_NO_GRAD);
  CHECK(def->grad == NULL);
}

TEST(op_stop_gradient_rejects_int_input) {
  ot_case c = {
      .op = "StopGradient", .n_in = 1, .in = {{.shape = ot_i32(1, 3)}}, .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "input must be f32"));
}
