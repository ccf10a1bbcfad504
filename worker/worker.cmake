# ps-worker: the training run (ember_worker: the loop in ps_train.c, with evaluation,
# distribution, checkpoints and reporting beside it) and its thin main (flags).
ember_library(ember_worker SOURCES ps_train.c ps_train_eval.c ps_train_dist.c ps_train_ckpt.c
                                   ps_train_report.c ps_train_stream.c ps_train_cache.c
                                   ps_train_deep.c
                                   ps_train_plan.c
  LIBS ember_client ember_model ember_kernels ember_data ember_collectives ember_http ember_metrics ember_common
       PkgConfig::JANSSON m)
ember_binary(ps-worker SOURCES ps_worker_main.c LIBS ember_worker)
