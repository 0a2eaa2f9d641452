-- llmtrain 0.2.0 — MPI-native GPT training (Lmod modulefile)
-- Edit `prefix` and the dependency names for your site.
help([[
llmtrain: MPI-native LLM training in C.  Usage: srun ./llmtrain input.nml
Example inputs in $LLMTRAIN_HOME/inputs, job scripts in $LLMTRAIN_HOME/jobscripts.
]])
whatis("Name: llmtrain")
whatis("Version: 0.2.0")
whatis("Description: MPI-native GPT training (data parallel, HDF5 weights, CPU backend)")

local prefix = "/opt/llmtrain/0.2.0"

-- The libraries llmtrain was linked against; use your site's module names.
depends_on("openmpi")
depends_on("hdf5-parallel")
depends_on("openblas")
depends_on("hwloc")
depends_on("papi")

setenv("LLMTRAIN_HOME", prefix)
prepend_path("PATH", prefix)
-- One OpenMP thread per core given to the rank by Slurm (--cpus-per-task). llmtrain pins its
-- threads to the cores it binds each rank to, whatever these say (they are harmless).
setenv("OMP_PROC_BIND", "close")
setenv("OMP_PLACES", "cores")
