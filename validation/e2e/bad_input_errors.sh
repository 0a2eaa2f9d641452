#!/usr/bin/env bash
# Bad input under 2 ranks: each case ends with exit code 2 within 60 s (no hang), one error
# message printed once that names what is wrong, and no core dump / MPI abort banner.
source "$(dirname "$0")/lib.bash"
ulimit -c 0
g=$TEST_DIR
write_tiny_nml $g/good.nml dp=2 gb=8
sed 's/n_layer = 2/n_layers = 2/' $g/good.nml >$g/unknown_key.nml
check_case unknown_key "unknown_key.nml:7" $g/unknown_key.nml
check_case unknown_key_names_key "n_layers" $g/unknown_key.nml
sed 's/&model/\&modle/' $g/good.nml >$g/unknown_group.nml
check_case unknown_group "modle" $g/unknown_group.nml
sed "s/lr = 3e-3/lr = 'fast'/" $g/good.nml >$g/wrong_type.nml
check_case wrong_type "lr" $g/wrong_type.nml
sed "s/max_steps = 50/max_steps = -5/" $g/good.nml >$g/negative.nml
check_case negative_steps "max_steps" $g/negative.nml
sed "s/mode = 'train'/mode = 'fit'/" $g/good.nml >$g/bad_mode.nml
check_case bad_mode "'fit'" $g/bad_mode.nml
sed "s/d_model = 64/d_model = 66/" $g/good.nml >$g/heads.nml
check_case heads_do_not_divide "n_head" $g/heads.nml
sed -e "s/dp = 2/dp = 3/" -e "s/global_batch = 8/global_batch = 12/" $g/good.nml >$g/grid.nml
check_case grid_not_world "dp*tp*pp" $g/grid.nml
sed "s/global_batch = 8/global_batch = 12/" $g/good.nml >$g/batch.nml
check_case batch_not_divisible "global_batch" $g/batch.nml
sed -e "s/dp = 2/dp = 1, tp = 3/" -e "s/global_batch = 8/global_batch = 4/" $g/good.nml >$g/tp3.nml
check_case tp_does_not_divide_heads "tp = 3 must divide" $g/tp3.nml 3
sed -e "s/dp = 2/dp = 1, pp = 3/" -e "s/global_batch = 8/global_batch = 4/" $g/good.nml >$g/pp3.nml
check_case pp_exceeds_layers "pp = 3 exceeds &model n_layer = 2" $g/pp3.nml 3
check_case missing_file "no_such.nml" $g/no_such.nml
sed "s|data/tiny/train_\*.bin|data/none_*.bin|" $g/good.nml >$g/nodata.nml
check_case no_data_files "data/none_*.bin" $g/nodata.nml
# a shard with a bad magic number and one truncated
$PYTHON - "$g" <<'PY'
import numpy as np, sys
d = sys.argv[1]
h = np.zeros(256, np.int32); h[0], h[1], h[2] = 12345, 1, 100
open(d + "/badmagic.bin", "wb").write(h.tobytes() + np.zeros(100, np.uint16).tobytes())
h[0] = 20240520
open(d + "/short.bin", "wb").write(h.tobytes() + np.zeros(60, np.uint16).tobytes())
PY
sed "s|data/tiny/train_\*.bin|$g/badmagic.bin|" $g/good.nml >$g/badmagic.nml
check_case bad_magic_shard "badmagic.bin" $g/badmagic.nml
sed "s|data/tiny/train_\*.bin|$g/short.bin|" $g/good.nml >$g/short.nml
check_case truncated_shard "short.bin" $g/short.nml
printf '&run\n  name = "x\n/\n' >$g/syntax.nml
check_case unterminated_string "syntax.nml:2" $g/syntax.nml
