/* Shape ops: Flatten, Reshape, Concat. */
#include "engine/op.h"
#include "optest.h"
#include "test.h"

/* Runs c forward: its one output must have shape `want` and values v. */
static int forward_is(const ot_case *c, dpm_shape want, const float *v) {
  dpm_tensor y[1];
  dpm_err err = {0};
  if (ot_forward(c, y, &err)) {
    printf("    forward failed: %s\n", err.msg);
    return 0;
  }
  char a[64], b[64];
  int ok = dpm_shape_equal(&y[0].shape, &want);
  if (!ok)
    printf("    output %s, expected %s\n", dpm_shape_str(&y[0].shape, a, sizeof a),
           dpm_shape_str(&want, b, sizeof b));
  else ok = ot_maxdiff(dpm_f32(&y[0]), v, dpm_shape_numel(&want)) == 0;
  dpm_tensor_fini(&y[0]);
  return ok;
}

/* ot_forward must fail with a message containing msg. */
static int rejects(const ot_case *c, const char *msg) {
  dpm_tensor y[1];
  dpm_err err = {0};
  if (ot_forward(c, y, &err) == DPM_OK) {
    dpm_tensor_fini(&y[0]);
    printf("    accepted, expected \"%s\"\n", msg);
    return 0;
  }
  if (strstr(err.msg, msg)) return 1;
  printf("    \"%s\" lacks \"%s\"\n", err.msg, msg);
  return 0;
}

static float iota[64];
__attribute__((constructor)) static void fill_iota(void) {
  for (int i = 0; i < 64; i++) iota[i] = (float)i;
}

TEST(op_flatten_forward) {
  ot_case c = {.op = "Flatten", .n_in = 1,
               .in = {{.shape = ot_f32(3, 2, 3, 4), .f = iota}}, .n_out = 1};
  CHECK(forward_is(&c, ot_f32(2, 2, 12), iota));
  c.args = "axis=2";
  CHECK(forward_is(&c, ot_f32(2, 6, 4), iota));
  c.args = "axis=0";
  CHECK(forward_is(&c, ot_f32(2, 1, 24), iota));
  c.args = "axis=3";
  CHECK(forward_is(&c, ot_f32(2, 24, 1), iota));
}

TEST(op_flatten_gradcheck) {
  ot_case c = {.op = "Flatten", .n_in = 1, .in = {{.shape = ot_f32(4, 2, 3, 1, 5)}},
               .n_out = 1};
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c.args = "axis=3";
  c.in[0].shape = ot_f32(4, 3, 1, 7, 2);
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
}

TEST(op_flatten_rejects_bad_axis) {
  ot_case c = {.op = "Flatten", .args = "axis=3", .n_in = 1,
               .in = {{.shape = ot_f32(2, 4, 5)}}, .n_out = 1};
  CHECK(rejects(&c, "axis 3 is beyond the 2 dimensions of input f32[4,5]"));
  c.args = "axis=-1";
  CHECK(rejects(&c, "argument 'axis' = -1 is outside [0, 4]"));
}

TEST(op_reshape_forward) {
  ot_case c = {.op = "Reshape", .args = "shape=0,-1", .n_in = 1,
               .in = {{.shape = ot_f32(3, 2, 3, 4), .f = iota}}, .n_out = 1};
  CHECK(forward_is(&c, ot_f32(2, 2, 12), iota));
  c.args = "shape=4,-1,2";
  CHECK(forward_is(&c, ot_f32(3, 4, 3, 2), iota));
  c.args = "shape=24";
  CHECK(forward_is(&c, ot_f32(1, 24), iota));
  c.args = "shape=0,0,2,2";
  CHECK(forward_is(&c, ot_f32(4, 2, 3, 2, 2), iota));
}

TEST(op_reshape_gradcheck) {
  ot_case c = {.op = "Reshape", .args = "shape=-1,5", .n_in = 1,
               .in = {{.shape = ot_f32(3, 3, 5, 1)}}, .n_out = 1};
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c.args = "shape=0,7,-1";
  c.in[0].shape = ot_f32(2, 3, 21);
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
}

TEST(op_reshape_rejects_bad_shape) {
  ot_case c = {.op = "Reshape", .args = "shape=5,-1", .n_in = 1,
               .in = {{.shape = ot_f32(2, 4, 6)}}, .n_out = 1};
  CHECK(rejects(&c, "shape does not fit the 24 elements of input f32[4,6]"));
  c.args = "shape=5,5";
  CHECK(rejects(&c, "shape does not fit the 24 elements"));
  c.args = "shape=-1,2,-1";
  CHECK(rejects(&c, "shape has more than one -1"));
  c.args = "shape=0,0,0";
  CHECK(rejects(&c, "shape[2] = 0 but input f32[4,6] has no dimension 2"));
  c.args = "shape=1,1,1,2,12";
  CHECK(rejects(&c, "shape has 5 dimensions, at most 4 allowed"));
  c.args = "shape=2147483647,2147483647,2147483647,2147483647";
  CHECK(rejects(&c, "shape does not fit"));
  c.args = "shape=-2,-12";
  CHECK(rejects(&c, "argument 'shape' = -2 is outside"));
}

TEST(op_concat_forward) {
  const float a[] = {0, 1, 2, 3}, b[] = {10, 11, 12, 13, 14, 15, 16, 17};
  ot_case c = {.op = "Concat", .n_in = 2,
               .in = {{.shape = ot_f32(3, 2, 1, 2), .f = a},
                      {.shape = ot_f32(3, 2, 2, 2), .f = b}},
               .n_out = 1};
  const float want1[] = {0, 1, 10, 11, 12, 13, 2, 3, 14, 15, 16, 17};
  CHECK(forward_is(&c, ot_f32(3, 2, 3, 2), want1));
  c.args = "axis=2"; /* [2,2,1] ++ [2,2,3] */
  c.in[0].shape = ot_f32(3, 2, 2, 1);
  c.in[1].shape = ot_f32(3, 2, 2, 2);
  const float want2[] = {0, 10, 11, 1, 12, 13, 2, 14, 15, 3, 16, 17};
  CHECK(forward_is(&c, ot_f32(3, 2, 2, 3), want2));
  c.args = "axis=0";
  c.in[0].shape = ot_f32(2, 1, 4);
  c.in[1].shape = ot_f32(2, 2, 4);
  const float want0[] = {0, 1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 17};
  CHECK(forward_is(&c, ot_f32(2, 3, 4), want0));
}

TEST(op_concat_gradcheck) {
  ot_case c = {.op = "Concat", .n_in = 3,
               .in = {{.shape = ot_f32(4, 2, 3, 2, 3)},
                      {.shape = ot_f32(4, 2, 1, 2, 3)},
                      {.shape = ot_f32(4, 2, 5, 2, 3)}},
               .n_out = 1, .seed = 11};
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c.args = "axis=3";
  c.in[0].shape = ot_f32(4, 3, 1, 2, 1);
  c.in[1].shape = ot_f32(4, 3, 1, 2, 4);
  c.in[2].shape = ot_f32(4, 3, 1, 2, 2);
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c.in[1].no_grad = 1; /* an absent gradient output in the middle */
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c.in[1].no_grad = 0;
  c.in[2].no_grad = 1; /* and last */
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
}

TEST(op_concat_gradcheck_one_and_many_inputs) {
  ot_case c = {.op = "Concat", .n_in = 1, .in = {{.shape = ot_f32(2, 3, 5)}}, .n_out = 1};
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
  c.n_in = OT_MAX_IN;
  for (int k = 0; k < OT_MAX_IN; k++) c.in[k].shape = ot_f32(2, 3, 1 + k % 3);
  CHECK(ot_gradcheck(&c, 1e-2, 200) <= 1e-3);
}

TEST(op_concat_rejects_mismatch) {
  ot_case c = {.op = "Concat", .n_in = 2,
               .in = {{.shape = ot_f32(3, 2, 3, 4)}, {.shape = ot_f32(3, 2, 5, 3)}},
               .n_out = 1};
  CHECK(rejects(&c, "input 1 f32[2,5,3] does not match input 0 f32[2,3,4] off axis 1"));
  c.in[1].shape = ot_f32(2, 2, 3);
  CHECK(rejects(&c, "input 1 f32[2,3] does not match input 0"));
  c.in[1].shape = ot_i32(3, 2, 3, 4);
  CHECK(rejects(&c, "every input must be f32"));
  c.args = "axis=3";
  c.in[1].shape = ot_f32(3, 2, 3, 4);
  CHECK(rejects(&c, "axis 3 is beyond the 3 dimensions of input 0 f32[2,3,4]"));
}
