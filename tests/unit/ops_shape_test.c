/* Shape ops: Flatten, Reshape, Concat. */
#include "engine/op.h"
#include "optest.h"
#include "test.h"

static float iota[64];
__attribute__((constructor)) static void fill_iota(void) {
  for (int i = 0; i < 64; i++) iota[i] = (float)i;
}

TEST(op_flatten_forward) {
  ot_case c = {.op = "Flatten",
               .n_in = 1,
               .in = {{.shape = ot_f32(3, 2, 3, 4), .f = iota}},
               .n_out = 1};
  CHECK(ot_forward_is(&c, ot_f32(2, 2, 12), iota, 0));
  c.args = "axis=2";
  CHECK(ot_forward_is(&c, ot_f32(2, 6, 4), iota, 0));
  c.args = "axis=0";
  CHECK(ot_forward_is(&c, ot_f32(2, 1, 24), iota, 0));
  c.args = "axis=3";
  CHECK(ot_forward_is(&c, ot_f32(2, 24, 1), iota, 0));
}

/* The default axis: the op table's "Flatten" (tests/opcases/cases.c). */
TEST(op_flatten_gradcheck) {
  ot_case c = {.op = "Flatten",
               .args = "axis=3",
               .n_in = 1,
               .in = {{.shape = ot_f32(4, 3, 1, 7, 2)}},
               .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_flatten_rejects_bad_axis) {
  ot_case c = {.op = "Flatten",
               .args = "axis=3",
               .n_in = 1,
               .in = {{.shape = ot_f32(2, 4, 5)}},
               .n_out = 1};
  CHECK(ot_rejects(&c, "axis 3 is beyond the 2 dimensions of input f32[4,5]"));
  c.args = "axis=-1";
  CHECK(ot_rejects(&c, "argument 'axis' = -1 is outside [0, 4]"));
}

TEST(op_reshape_forward) {
  ot_case c = {.op = "Reshape",
               .args = "shape=0,-1",
               .n_in = 1,
               .in = {{.shape = ot_f32(3, 2, 3, 4), .f = iota}},
               .n_out = 1};
  CHECK(ot_forward_is(&c, ot_f32(2, 2, 12), iota, 0));
  c.args = "shape=4,-1,2";
  CHECK(ot_forward_is(&c, ot_f32(3, 4, 3, 2), iota, 0));
  c.args = "shape=24";
  CHECK(ot_forward_is(&c, ot_f32(1, 24), iota, 0));
  c.args = "shape=0,0,2,2";
  CHECK(ot_forward_is(&c, ot_f32(4, 2, 3, 2, 2), iota, 0));
}

TEST(op_reshape_gradcheck) {
  ot_case c = {.op = "Reshape",
               .args = "shape=-1,5",
               .n_in = 1,
               .in = {{.shape = ot_f32(3, 3, 5, 1)}},
               .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.args = "shape=0,7,-1";
  c.in[0].shape = ot_f32(2, 3, 21);
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_reshape_rejects_bad_shape) {
  ot_case c = {.op = "Reshape",
               .args = "shape=5,-1",
               .n_in = 1,
               .in = {{.shape = ot_f32(2, 4, 6)}},
               .n_out = 1};
  CHECK(ot_rejects(&c, "shape does not fit the 24 elements of input f32[4,6]"));
  c.args = "shape=5,5";
  CHECK(ot_rejects(&c, "shape does not fit the 24 elements"));
  c.args = "shape=-1,2,-1";
  CHECK(ot_rejects(&c, "shape has more than one -1"));
  c.args = "shape=0,0,0";
  CHECK(ot_rejects(&c, "shape[2] = 0 but input f32[4,6] has no dimension 2"));
  c.args = "shape=1,1,1,2,12";
  CHECK(ot_rejects(&c, "shape has 5 dimensions, at most 4 allowed"));
  c.args = "shape=2147483647,2147483647,2147483647,2147483647";
  CHECK(ot_rejects(&c, "shape does not fit"));
  c.args = "shape=-2,-12";
  CHECK(ot_rejects(&c, "argument 'shape' = -2 is outside"));
}

TEST(op_concat_forward) {
  const float a[] = {0, 1, 2, 3}, b[] = {10, 11, 12, 13, 14, 15, 16, 17};
  ot_case c = {.op = "Concat",
               .n_in = 2,
               .in = {{.shape = ot_f32(3, 2, 1, 2), .f = a},
                      {.shape = ot_f32(3, 2, 2, 2), .f = b}},
               .n_out = 1};
  const float want1[] = {0, 1, 10, 11, 12, 13, 2, 3, 14, 15, 16, 17};
  CHECK(ot_forward_is(&c, ot_f32(3, 2, 3, 2), want1, 0));
  c.args = "axis=2"; /* [2,2,1] ++ [2,2,3] */
  c.in[0].shape = ot_f32(3, 2, 2, 1);
  c.in[1].shape = ot_f32(3, 2, 2, 2);
  const float want2[] = {0, 10, 11, 1, 12, 13, 2, 14, 15, 3, 16, 17};
  CHECK(ot_forward_is(&c, ot_f32(3, 2, 2, 3), want2, 0));
  c.args = "axis=0";
  c.in[0].shape = ot_f32(2, 1, 4);
  c.in[1].shape = ot_f32(2, 2, 4);
  const float want0[] = {0, 1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 17};
  CHECK(ot_forward_is(&c, ot_f32(2, 3, 4), want0, 0));
}

/* Axis 1: the op table's "Concat axis 1" (tests/opcases/cases.c). */
TEST(op_concat_gradcheck) {
  ot_case c = {.op = "Concat",
               .args = "axis=3",
               .n_in = 3,
               .in = {{.shape = ot_f32(4, 3, 1, 2, 1)},
                      {.shape = ot_f32(4, 3, 1, 2, 4)},
                      {.shape = ot_f32(4, 3, 1, 2, 2)}},
               .n_out = 1,
               .seed = 11};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.in[1].no_grad = 1; /* an absent gradient output in the middle */
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.in[1].no_grad = 0;
  c.in[2].no_grad = 1; /* and last */
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_concat_gradcheck_one_and_many_inputs) {
  ot_case c = {.op = "Concat", .n_in = 1, .in = {{.shape = ot_f32(2, 3, 5)}}, .n_out = 1};
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
  c.n_in = OT_MAX_IN;
  for (int k = 0; k < OT_MAX_IN; k++) c.in[k].shape = ot_f32(2, 3, 1 + k % 3);
  CHECK_WITHIN(ot_gradcheck(&c, 1e-2, 200), 1e-3);
}

TEST(op_concat_rejects_mismatch) {
  ot_case c = {.op = "Concat",
               .n_in = 2,
               .in = {{.shape = ot_f32(3, 2, 3, 4)}, {.shape = ot_f32(3, 2, 5, 3)}},
               .n_out = 1};
  CHECK(
      ot_rejects(&c, "input 1 f32[2,5,3] does not match input 0 f32[2,3,4] off axis 1"));
  c.in[1].shape = ot_f32(2, 2, 3);
  CHECK(ot_rejects(&c, "input 1 f32[2,3] does not match input 0"));
  c.in[1].shape = ot_i32(3, 2, 3, 4);
  CHECK(ot_rejects(&c, "every input must be f32"));
  c.args = "axis=3";
  c.in[1].shape = ot_f32(3, 2, 3, 4);
  CHECK(ot_rejects(&c, "axis 3 is beyond the 3 dimensions of input 0 f32[2,3,4]"));
}
