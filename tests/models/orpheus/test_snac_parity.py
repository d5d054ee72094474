"""Our SNAC decoder equals the `snac` package's `SNAC.decode` (snac 1.2.1) on tiny random checkpoints saved in
the released layout (config.json + pytorch_model.bin, as hubertsiuzdak/snac_24khz), loaded by our code;
checkpoint errors name what is wrong; the Hugging Face cache is read without network."""

from __future__ import annotations

import json

import pytest
import torch
from snac import SNAC

from orpheus_tiny import TINY_SNAC, silence_noise, write_snac
from voxrt.engine.errors import CheckpointError
from voxrt.models.orpheus import checkpoint
from voxrt.models.orpheus.make_checkpoint import SNAC_24KHZ_CONFIG
from voxrt.models.orpheus.snac import SnacConfig, SnacDecoder, load_snac

ATOL = 1e-6  # float32 on the CPU; what we see is 0 (the same ops in the same order)


def random_codes(num_frames: int, batch: int, seed: int, codebook_size: int = 4096) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, codebook_size, (batch, n * num_frames), generator=gen) for n in (1, 2, 4)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("snac-tiny")
    write_snac(directory, TINY_SNAC, seed=3)
    return directory, SNAC.from_pretrained(str(directory))  # the reference reads the layout we wrote


def test_parameter_names_are_the_references_decode_keys(tiny):
    _, ref = tiny
    ours = SnacDecoder(SnacConfig.from_dict(TINY_SNAC))
    decode_keys = {k for k in ref.state_dict() if k.startswith(("decoder.", "quantizer.")) and ".in_proj." not in k}
    assert set(ours.state_dict()) == decode_keys
    assert any(".parametrizations.weight.original0" in k for k in decode_keys)


def test_decode_equals_the_reference_with_its_noise(tiny):
    directory, ref = tiny
    ours = load_snac(directory)
    assert ours.is_folded and ours.noise == "random"
    codes = random_codes(5, batch=3, seed=0)
    torch.manual_seed(7)
    with torch.no_grad():
        theirs = ref.decode(codes)
    torch.manual_seed(7)  # the same draws: our NoiseBlocks call randn in the reference's order and shapes
    mine = ours.decode(codes)
    assert mine.shape == theirs.shape == (3, 1, 5 * 4 * 64)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=ATOL)
    # the reference's decode really is random: without the seed, two calls differ
    with torch.no_grad():
        assert not torch.equal(ref.decode(codes), ref.decode(codes))


def test_decode_without_noise_equals_the_reference_without_it(tiny):
    directory, ref = tiny
    ours = load_snac(directory, noise="off")
    codes = random_codes(3, batch=2, seed=1)
    silent = SNAC.from_pretrained(str(directory))
    silence_noise(silent)
    with torch.no_grad():
        theirs = silent.decode(codes)
    mine = ours.decode(codes)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=ATOL)
    assert torch.equal(ours.decode(codes), mine)  # deterministic
    with pytest.raises(ValueError, match="noise must be one of"):
        ours.set_noise("seeded")


def test_legacy_weight_norm_names_load_the_same(tiny, tmp_path):
    directory, _ = tiny
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    legacy = {}
    for key, value in state.items():  # torch.nn.utils.weight_norm's names, as older exports write them
        key = key.replace(".parametrizations.weight.original0", ".weight_g")
        legacy[key.replace(".parametrizations.weight.original1", ".weight_v")] = value
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    codes = random_codes(2, batch=1, seed=2)
    a, b = load_snac(directory, noise="off"), load_snac(tmp_path, noise="off")
    assert torch.equal(a.decode(codes), b.decode(codes))


def test_safetensors_weights_load_too(tiny, tmp_path):
    from safetensors.torch import save_file

    directory, _ = tiny
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    codes = random_codes(2, batch=1, seed=3)
    assert torch.equal(load_snac(directory, noise="off").decode(codes), load_snac(tmp_path, noise="off").decode(codes))


def test_checkpoint_errors_name_what_is_wrong(tiny, tmp_path):
    directory, _ = tiny
    with pytest.raises(CheckpointError, match="config.json not found"):
        load_snac(tmp_path)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    with pytest.raises(CheckpointError, match="weights not found.*pytorch_model.bin, model.safetensors"):
        load_snac(tmp_path)
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    broken = dict(state)
    del broken["decoder.model.2.block.1.parametrizations.weight.original1"]
    broken["decoder.model.99.alpha"] = torch.ones(1)
    torch.save(broken, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="1 missing keys: decoder.model.2.block.1.parametrizations.weight."
                                              "original1; 1 unexpected keys: decoder.model.99.alpha"):
        load_snac(tmp_path)
    wider = dict(TINY_SNAC, decoder_dim=64)
    (tmp_path / "config.json").write_text(json.dumps(wider))
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="size mismatch"):
        load_snac(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    (tmp_path / "config.json").write_text(json.dumps(TINY_SNAC))
    with pytest.raises(CheckpointError, match="cannot read SNAC weights"):
        load_snac(tmp_path)


def test_configs_the_decoder_cannot_serve_are_refused():
    with pytest.raises(CheckpointError, match="unknown keys \\['hop'\\]"):
        SnacConfig.from_dict({**SNAC_24KHZ_CONFIG, "hop": 512})
    with pytest.raises(CheckpointError, match="local attention"):
        SnacConfig.from_dict({**SNAC_24KHZ_CONFIG, "attn_window_size": 32})
    cfg = SnacConfig.from_dict(SNAC_24KHZ_CONFIG)
    assert (cfg.latent, cfg.samples_per_latent_frame, cfg.vq_strides) == (768, 512, (4, 2, 1))


def test_the_released_decoder_has_13m_parameters():
    with torch.device("meta"):
        model = SnacDecoder(SnacConfig.from_dict(SNAC_24KHZ_CONFIG))
    model.fold_weight_norm()
    assert 13.0e6 < sum(p.numel() for p in model.parameters()) < 13.2e6


def test_snac_found_beside_the_model_named_or_in_the_local_cache(tiny, tmp_path, monkeypatch):
    directory, _ = tiny
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hf_constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    with pytest.raises(CheckpointError, match="no SNAC codec found: hubertsiuzdak/snac_24khz is not in the local "
                                              "Hugging Face cache.*huggingface-cli download"):
        checkpoint.snac_dir(model_dir)
    # the cache's own layout: models--org--name/refs/main -> snapshots/<commit>/
    repo = cache / "models--hubertsiuzdak--snac_24khz"
    commit = "c29a77c025506947a7ff15a678787b66b4c2ff47"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name in ("config.json", "pytorch_model.bin"):
        (snapshot / name).write_bytes((directory / name).read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert checkpoint.snac_dir(model_dir) == snapshot
    assert load_snac(checkpoint.snac_dir(model_dir)).cfg == SnacConfig.from_dict(TINY_SNAC)
    beside = model_dir / "snac"
    beside.mkdir()
    assert checkpoint.snac_dir(model_dir) == snapshot  # an incomplete snac/ beside the model: the cache's
    (beside / "config.json").write_text("{}")
    (beside / "pytorch_model.bin").write_bytes(b"")
    assert checkpoint.snac_dir(model_dir) == beside
    assert checkpoint.snac_dir(model_dir, snac=str(directory)) == directory
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.snac_dir(model_dir, snac=str(tmp_path / "nope"))
    (beside / "config.json").unlink()
    with pytest.raises(CheckpointError, match="snac lacks config.json or pytorch_model.bin"):
        checkpoint.snac_dir(model_dir, snac=str(beside))
