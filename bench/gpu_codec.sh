#!/usr/bin/env bash
# One GPU call for the codec (issue 14) and the frame's launch chain (issue 12): the codec variants' accuracy
# and chunk times (gpu_codec.py), each conv shape under three formulations (gpu_codec_convs.py, 25 x 16 and
# 2 x 1), the profile of a 25 x 16 chunk by kernel and by op shape (profile2: of a 2 x 1 chunk), and the PDL micro-benchmark (gpu_pdl.py).
#   source .gpu/prelude.sh; export PYTHONPATH=$PWD:$PYTHONPATH; OUT=$OUT bash bench/gpu_codec.sh
# Env: STEPS (default "codec convs profile pdl"; also profile2, split = `voxrt profile-split`), CKPT (/tmp/q17),
# CODEC_SMS (72: the partition gpu_codec.py also times the default variant on), CONVS_SHAPES ("25 16;2 1": the
# frames x batch shapes gpu_codec_convs.py runs, `;`-separated), CODEC_VARIANTS (gpu_codec.py --variants: a
# comma-separated subset; default every variant). Results under $OUT/codec, tarred to
# $OUT/codec.tgz (the device tool brings back a few files only).
set -u
R=$OUT/codec; CKPT=${CKPT:-/tmp/q17}; mkdir -p "$R"
source bench/gpu_setup.sh
for step in ${STEPS:-codec convs profile pdl}; do
  echo "== $step $(date -u +%T)"
  case $step in
    codec) python -u bench/gpu_codec.py --checkpoint "$CKPT" --codec-sms "${CODEC_SMS:-72}" --out "$R" \
             ${CODEC_VARIANTS:+--variants "$CODEC_VARIANTS"} > "$R/codec.log" 2>&1
           tail -18 "$R/codec.log" ;;
    split) python -m voxrt.cli profile-split --model qwen3-tts --checkpoint "$CKPT" --out "$R/split.json" > "$R/split.log" 2>&1
           tail -20 "$R/split.log" ;;
    convs) IFS=';' read -ra shapes <<< "${CONVS_SHAPES:-25 16;2 1}"
           for shape in "${shapes[@]}"; do set -- $shape
             python -u bench/gpu_codec_convs.py --checkpoint "$CKPT" --frames $1 --batch $2 --out "$R" \
               > "$R/convs-$1x$2.log" 2>&1; grep -v Warning "$R/convs-$1x$2.log" | tail -40; done ;;
    profile) python -u bench/gpu_codec_profile.py --checkpoint "$CKPT" --output-kernel > "$R/profile.log" 2>&1
             grep -A40 "Input Shapes" "$R/profile.log" | cut -c1-260 | head -45; tail -14 "$R/profile.log"; grep "CUDA kernels" "$R/profile.log" ;;
    profile2) python -u bench/gpu_codec_profile.py --checkpoint "$CKPT" --frames 2 --batch 1 > "$R/profile-2x1.log" 2>&1
             grep "CUDA kernels" "$R/profile-2x1.log"; grep -A12 "per stage" "$R/profile-2x1.log" | tail -13 ;;
    pdl) python -u bench/gpu_pdl.py --out "$R" > "$R/pdl.log" 2>&1; tail -10 "$R/pdl.log" ;;
  esac
done
tar czf "$OUT/codec.tgz" -C "$OUT" codec
