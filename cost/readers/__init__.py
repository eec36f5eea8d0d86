"""The readers' room: every file paraplan reads or writes (instances in either form, part files,
plans in either form, network events, the GPU catalogue) turned into the records of cost/specs.py
and cost/plan_specs.py, and back. One module per job: strict_yaml (parsing within limits),
fields (typed access to a mapping), gpus, model, job, search, cluster, scenarios, checks (the
whole instance), instance (the one instance reader), instance_writer, plan_reader, plan_writer."""
