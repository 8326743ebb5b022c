/* FC: Y = X W^T + b over X flattened at axis 1; params and gradient. */
#include "engine/op.h"
#include "optest.h"
#include "test.h"

TEST(op_fc_forward) {
  const float x[] = {1, 2, 3, 4, 5, 6}, w[] = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  const float b[] = {0.5f, -1};
  ot_case c = {.op = "FC",
               .args = "dim_out=2",
               .n_in = 3,
               .in = {{.shape = ot_f32(2, 2, 3), .f = x},
                      {.shape = ot_f32(2, 2, 3), .f = w},
                      {.shape = ot_f32(1, 2), .f = b}},
               .n_out = 1};
  const float want[] = {-1.5f, 2, -1.5f, 6.5f};
  CHECK(ot_forward_is(&c, ot_f32(2, 2, 2), want, 0));
}

/* With DPM_FUSE_RELU the kernel applies Relu to Y itself. */
TEST(op_fc_fused_relu) {
  const float x[] = {1, 2, 3, 4, 5, 6}, w[] = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  const float b[] = {0.5f, -1};
  ot_case c = {.op = "FC",
               .args = "dim_out=2",
               .n_in = 3,
               .in = {{.shape = ot_f32(2, 2, 3), .f = x},
                      {.shape = ot_f32(2, 2, 3), .f = w},
                      {.shape = ot_f32(1, 2), .f = b}},
               .n_out = 1,
               .fuse = DPM_FUSE_RELU};
  const float want[] = {0, 2, 0, 6.5f};
  CHECK(ot_forward_is(&c, ot_f32(2, 2, 2), want, 0));
}

/* X of 4 dimensions is read as [N, C*H*W]. */
TEST(op_fc_forward_flattens_input) {
  const float x[] = {1, 2, 3, 4, -1, -2, -3, -4}, w[] = {1, 1, 1, 1, 1, -1, 1, -1},
              b[] = {0, 100};
  ot_case c = {.op = "FC",
               .args = "dim_out=2",
               .n_in = 3,
               .in = {{.shape = ot_f32(4, 2, 2, 1, 2), .f = x},
                      {.shape = ot_f32(2, 2, 4), .f = w},
                      {.shape = ot_f32(1, 2), .f = b}},
               .n_out = 1};
  const float want[] = {10, 98, -10, 102};
  CHECK(ot_forward_is(&c, ot_f32(2, 2, 2), want, 0));
}

/* FC is linear in each single input element: OT_LINEAR_EPS. */
TEST(op_fc_gradcheck) {
  ot_case c = {.op = "FC",
               .args = "dim_out=3",
               .n_in = 3,
               .in = {{.shape = ot_f32(2, 5, 7)},
                      {.shape = ot_f32(2, 3, 7)},
                      {.shape = ot_f32(1, 3)}},
               .n_out = 1,
               .seed = 1};
  CHECK_WITHIN(ot_gradcheck(&c, OT_LINEAR_EPS, 200), 1e-3);
  /* 4-D input, 17 outputs: one 16-column block of db and a remainder */
  c.args = "dim_out=17";
  c.in[0].shape = ot_f32(4, 3, 2, 3, 1);
  c.in[1].shape = ot_f32(2, 17, 6);
  c.in[2].shape = ot_f32(1, 17);
  CHECK_WITHIN(ot_gradcheck(&c, OT_LINEAR_EPS, 200), 1e-3);
}

/* The data input's gradient is usually not wanted: dX is skipped. */
TEST(op_fc_gradcheck_without_input_grad) {
  ot_case c = {.op = "FC",
               .args = "dim_out=33",
               .n_in = 3,
               .in = {{.shape = ot_f32(2, 9, 13), .no_grad = 1},
                      {.shape = ot_f32(2, 33, 13)},
                      {.shape = ot_f32(1, 33)}},
               .n_out = 1,
               .seed = 2};
  CHECK_WITHIN(ot_gradcheck(&c, OT_LINEAR_EPS, 200), 1e-3);
  c.in[2].no_grad = 1; /* and a frozen bias */
  CHECK_WITHIN(ot_gradcheck(&c, OT_LINEAR_EPS, 200), 1e-3);
}

TEST(op_fc_param_shapes) {
  const dpm_op_def *def = dpm_op_find("FC");
  CHECK(def != NULL);
  CHECK(!strcmp(def->params[0].suffix, "_w") && def->params[0].kind == DPM_BLOB_PARAM);
  CHECK(!strcmp(def->params[0].init, "xavier"));
  CHECK(!strcmp(def->params[0].init_arg, "weight_init"));
  CHECK(!strcmp(def->params[0].value_arg, "weight_std"));
  CHECK(!strcmp(def->params[1].suffix, "_b") && def->params[1].kind == DPM_BLOB_PARAM);
  CHECK(!strcmp(def->params[1].init, "constant"));
  CHECK(!strcmp(def->params[1].init_arg, "bias_init"));
  CHECK(!strcmp(def->params[1].value_arg, "bias_value"));
  CHECK(def->params[2].suffix == NULL);
  dpm_node n = {.def = def};
  dpm_err err = {0};
  CHECK_INT(dpm_node_set_defaults(&n, &err), DPM_OK);
  CHECK_INT(dpm_node_set_args(&n, "dim_out=10 weight_init=msra", &err), DPM_OK);
  dpm_shape x = ot_f32(4, 64, 1, 28, 28), p[2];
  CHECK_INT(def->param_shapes(&n, &x, p, &err), DPM_OK);
  dpm_shape w = ot_f32(2, 10, 784), b = ot_f32(1, 10);
  CHECK(dpm_shape_equal(&p[0], &w));
  CHECK(dpm_shape_equal(&p[1], &b));
  x = ot_f32(1, 64);
  CHECK_INT(def->param_shapes(&n, &x, p, &err), DPM_SHAPE);
  CHECK_HAS(err.msg, "input must have 2 to 4 dimensions, got f32[64]");
}

TEST(op_fc_rejects_bad_shapes) {
  ot_case c = {.op = "FC",
               .args = "dim_out=3",
               .n_in = 3,
               .in = {{.shape = ot_f32(2, 5, 7)},
                      {.shape = ot_f32(2, 3, 6)},
                      {.shape = ot_f32(1, 3)}},
               .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SHAPE,
                          "weight is f32[3,6], expected f32[3,7] for input f32[5,7]"));
  c.args = "dim_out=4";
  c.in[1].shape = ot_f32(2, 3, 7);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "weight is f32[3,7], expected f32[4,7]"));
  c.args = "dim_out=3";
  c.in[2].shape = ot_f32(2, 1, 3);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "bias is f32[1,3], expected f32[3]"));
  c.in[2].shape = ot_f32(1, 3);
  c.in[0].shape = ot_i32(2, 5, 7);
  CHECK(ot_rejects_status(&c, DPM_SHAPE, "input must be f32, bf16 or f16, got i32"));
}

TEST(op_fc_rejects_bad_arguments) {
  ot_case c = {.op = "FC",
               .args = "dim_out=0",
               .n_in = 3,
               .in = {{.shape = ot_f32(2, 5, 7)},
                      {.shape = ot_f32(2, 3, 7)},
                      {.shape = ot_f32(1, 3)}},
               .n_out = 1};
  CHECK(ot_rejects_status(&c, DPM_SPEC, "argument 'dim_out' = 0 is outside [1, "));
  c.args = "dim_out=3 weight_init=zeros";
  CHECK(ot_rejects_status(&c, DPM_SPEC,
                          "argument 'weight_init' must be one of "
                          "xavier|msra|gaussian|uniform|constant, got 'zeros'"));
  c.args = "dim_out=3 bias_value=x";
  CHECK(ot_rejects_status(&c, DPM_SPEC, "argument 'bias_value' expects a number"));
}
