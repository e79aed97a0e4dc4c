# A tasks file: 'postern dispatch examples/tasks.hcl'.
#
# Each task is placed on a machine of the pool whose measured record can wall
# its lane and whose labels meet its needs, in a free slot; the least loaded
# machine that fits wins. A machine never measured takes nothing: measure the
# pool first with 'postern machine probe-confinement --all'.

policy      = "policies/model-api.hcl" # every task's policy, unless it names its own
machines    = ["gpu1", "ci-runner", "local"]
per_machine = 2                        # runs at once on one machine
retries     = 1                        # times a task is placed again when its machine is lost
timeout     = "2h"                     # a run that takes longer is stopped (and fails)

# The GPU box takes one run at a time, whatever per_machine says.
machine "gpu1" { per_machine = 1 }

task "fix-auth" {
  command = ["claude", "-p", "fix the failing auth test"]
}

task "docs" {
  command  = ["claude", "-p", "update the docs for the new flags"]
  machines = ["ci-runner"]
  dir      = "docs"
}

# needs = ["gpu"] is met by a machine whose record measured GPUs, or that has
# a gpu label ('postern machine label gpu1 gpu=a100').
task "train" {
  command = ["python3", "train.py", "--epochs", "3"]
  needs   = ["gpu"]
  policy  = "policies/package-registry.hcl"
  env     = { PYTHONUNBUFFERED = "1" }
  timeout = "6h"
}

# A task that needs no network at all: behind the wall, nothing allowed.
task "lint" {
  command = ["make", "lint"]
  network = "none"
  retries = 0
}
