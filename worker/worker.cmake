# ps-worker: the training loop (ember_worker) and its thin main.
ember_library(ember_worker SOURCES ps_train.c
  LIBS ember_client ember_model ember_kernels ember_data ember_collectives ember_http ember_metrics ember_common
       PkgConfig::JANSSON m)
ember_binary(ps-worker SOURCES ps_worker_main.c LIBS ember_worker)
