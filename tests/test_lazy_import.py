"""Every `--help` of the command line and a bad flag import neither torch nor transformers (they take seconds); `import
hf_neutreno` registers the Auto classes, and the package's other names load on first use.

Each check runs in a fresh process, where nothing imported by the tests hides an import."""

import json

from cli_process import run_python
from hf_neutreno.cli import SUBCOMMANDS
from hf_neutreno.models.value_path_defaults import DEFAULT_COEFFICIENTS

HEAVY = ("torch", "transformers", "datasets")

# What the package registered with the Auto classes before it was made lazy, written out: model type -> {Auto class:
# model class}; the config of each is registered with AutoConfig.
REGISTERED = {
    "neutreno_vit": {
        "AutoModel": "NeuTRENOViTModel",
        "AutoModelForImageClassification": "NeuTRENOViTForImageClassification",
        "AutoModelForSemanticSegmentation": "NeuTRENOViTForSemanticSegmentation",
    },
    "eigen_vit": {"AutoModel": "EigenViTModel", "AutoModelForImageClassification": "EigenViTForImageClassification"},
    "neutreno_gpt": {"AutoModel": "NeuTRENOGPTModel", "AutoModelForCausalLM": "NeuTRENOGPTForCausalLM"},
}
CONFIGS = {"neutreno_vit": "NeuTRENOViTConfig", "eigen_vit": "EigenViTConfig", "neutreno_gpt": "NeuTRENOGPTConfig"}


def test_every_help_imports_neither_torch_nor_transformers():
    """`hf-neutreno --help` and each subcommand's `--help` print their help; no heavy library is imported, checked
    after each one."""
    out = run_python(f"""
import contextlib, io, json, sys
from hf_neutreno_cli import main  # the command's entry point
results = {{}}
for argv in ([], *([name] for name in {list(SUBCOMMANDS)!r})):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main([*argv, "--help"])
    results[" ".join(argv) or "hf-neutreno"] = [code, text.getvalue(), [m for m in {HEAVY!r} if m in sys.modules]]
print(json.dumps(results))
""")
    results = json.loads(out)
    assert list(results) == ["hf-neutreno", *SUBCOMMANDS]
    for command, (code, text, imported) in results.items():
        assert code == 0 and text.startswith("usage: hf-neutreno"), (command, code, text[:200])
        assert imported == [], (command, imported)
    text = {command: " ".join(text.split()) for command, (_, text, _) in results.items()}  # whatever the wrapping
    for name, (_, help_text) in SUBCOMMANDS.items():  # the top-level help lists every subcommand
        assert name in text["hf-neutreno"] and help_text[:40] in text["hf-neutreno"]
    # the subcommands' help shows the names and defaults their parsers take from the light modules
    assert "vit-micro" in text["compare"] and "value-residual-learnable" in text["compare"]
    assert "causal-lm" in text["compare"] and "sliding" in text["evaluate-lm"]
    assert (
        "cosine_similarity" in text["diagnose"] and f"(default: {DEFAULT_COEFFICIENTS['neutreno']})" in text["diagnose"]
    )


def test_a_bad_flag_is_reported_before_the_training_stack_loads(tmp_path):
    """Every subcommand checks the arguments that do not depend on the model before it imports torch and
    transformers: the error names the argument at once, exit status 2, nothing written."""
    out_dir, report = str(tmp_path / "out"), str(tmp_path / "report.json")
    cases = {
        "compare --variants softmax": "--variants 'softmax': choose two or more of",
        "compare --variants softmax,neutreno,bogus": "unknown: ['bogus']",
        "compare --batch-size 0": "--batch-size must be at least 1, got 0",
        "compare --warmup-ratio 1": "--warmup-ratio must be in [0, 1), got 1.0",
        "compare --neutreno-lambda -0.5": "--neutreno-lambda must be > 0",
        "compare --neutreno-lambda inf": "--neutreno-lambda must be a finite number, got inf",
        "compare --value-residual-alpha nan": "--value-residual-alpha must be in (0, 1]",
        "compare --learning-rate inf": "--learning-rate must be a finite number, got inf",
        "diagnose model --dataset digits --metrics bogus": "Unknown metric(s) ['bogus']",
        "diagnose model --dataset digits --num-samples 0": "`--num-samples` must be at least 1, got 0",
        "diagnose model --dataset digits --variants softmax,bogus": "`--variants` takes distinct names from",
        "evaluate-lm model --batch-size 0": "--batch-size must be at least 1, got 0",
        "evaluate-lm model --max-tokens 1": "--max-tokens must be at least 2, got 1",
        "push model bad/repo/id": "repo_id 'bad/repo/id' is not a Hub repository id",
        f"push {tmp_path} user/name": "has no config.json: not a saved model",
    }
    out = run_python(f"""
import contextlib, io, json, sys
from hf_neutreno_cli import main  # the command's entry point
results = {{}}
for command in {list(cases)!r}:
    extra = {{"compare": ["--output-dir", {out_dir!r}], "diagnose": ["--out", {report!r}]}}.get(command.split()[0], [])
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        code = main([*command.split(), *extra])
    results[command] = [code, errors.getvalue(), [m for m in {HEAVY!r} if m in sys.modules]]
print(json.dumps(results))
""")
    for command, (code, error, imported) in json.loads(out).items():
        name = command.split()[0]
        assert code == 2 and error.startswith(f"hf-neutreno {name}: error: ") and cases[command] in error, error
        assert imported == [], (command, imported)
    assert list(tmp_path.iterdir()) == []


def test_importing_the_package_registers_the_auto_classes_and_lists_every_name():
    """`import hf_neutreno`, nothing else: a folder of the package's model loads with an Auto class without
    `trust_remote_code` (no "run the custom code?" prompt), and every public name resolves to the class of its module.
    (For a while the import registered nothing until a class was used, and that load failed.)"""
    out = run_python("""
import json, tempfile
import hf_neutreno
from transformers import AutoConfig, AutoModelForImageClassification
config = AutoConfig.for_model("neutreno_vit", hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=16, image_size=8, patch_size=4, num_labels=3)
folder = tempfile.mkdtemp()
hf_neutreno.NeuTRENOViTForImageClassification(config).save_pretrained(folder)
loaded = AutoModelForImageClassification.from_pretrained(folder)
resolved = {name: getattr(hf_neutreno, name).__module__ for name in hf_neutreno.__all__}
print(json.dumps([type(config).__name__, type(loaded).__module__, resolved, dir(hf_neutreno)]))
""")
    config_name, loaded_module, resolved, names = json.loads(out)
    assert config_name == "NeuTRENOViTConfig" and loaded_module == "hf_neutreno.models.modeling_neutreno_vit"
    assert all(module.startswith("hf_neutreno.") for module in resolved.values()), resolved
    assert resolved["apply_value_path"] == "hf_neutreno.models.value_path"  # beside the model files it travels with
    assert resolved["NeuTRENOGPTConfig"] == "hf_neutreno.models.configuration_neutreno_gpt"
    assert {*CONFIGS.values(), "apply_value_path", "remove_value_path", "OversmoothingCallback"} <= set(resolved)
    assert set(resolved) <= set(names)  # dir() lists the names not loaded yet


def test_importing_the_models_registers_every_model_with_every_auto_class():
    """`import hf_neutreno.models` registers what the package registered before, no less and no more (for the Auto
    classes it uses), and marks each class for remote code with the Auto class `save_pretrained` records."""
    auto_classes = sorted({auto for models in REGISTERED.values() for auto in models})
    out = run_python(f"""
import json
import transformers
import hf_neutreno.models
found = {{}}
for model_type in {list(REGISTERED)!r}:
    config_class = type(transformers.AutoConfig.for_model(model_type))
    models = {{}}
    for auto_name in {auto_classes!r}:
        mapping = getattr(transformers, auto_name)._model_mapping
        if config_class in mapping:
            model_class = mapping[config_class]
            models[auto_name] = [model_class.__name__, model_class._auto_class]
    found[model_type] = [config_class.__name__, config_class._auto_class, models]
print(json.dumps(found))
""")
    found = json.loads(out)
    assert set(found) == set(REGISTERED)
    for model_type, (config_name, config_auto, models) in found.items():
        assert config_name == CONFIGS[model_type] and config_auto == "AutoConfig"
        assert models == {auto: [name, auto] for auto, name in REGISTERED[model_type].items()}, model_type


def test_the_light_names_are_the_ones_the_library_uses():
    """The names `--help` shows come from `hf_neutreno.names`, which imports the preset tables (they import
    nothing): they are the presets the configs build and the tasks `compare` runs."""
    from hf_neutreno import EigenViTConfig, NeuTRENOGPTConfig, NeuTRENOViTConfig, names
    from hf_neutreno.engine.tasks import TASKS

    assert names.IMAGE_PRESETS == sorted(EigenViTConfig.presets)
    assert names.LANGUAGE_MODEL_PRESETS == sorted(NeuTRENOGPTConfig.presets)
    assert set(names.IMAGE_MODELS) | set(names.SEGMENTATION_MODELS) == set(NeuTRENOViTConfig.presets)
    assert all("decoder_type" in NeuTRENOViTConfig.presets[name] for name in names.SEGMENTATION_MODELS)
    assert list(TASKS) == list(names.TASK_SPECS)
    assert all(
        (task.auto_class, task.processing_class, task.metric) == names.TASK_SPECS[task.name] for task in TASKS.values()
    )
