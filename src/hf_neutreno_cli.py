"""The `hf-neutreno` command's entry point, outside the package on purpose.

`import hf_neutreno` registers the package's configs and models with the Auto classes, which imports torch and
transformers (seconds). The command line finds this module in `sys.modules` and skips that step, so that `--help` and
a bad flag answer at once; each command imports the models where it needs them, and they register then.
"""


def main(argv=None) -> int:
    from hf_neutreno.cli import main as run

    return run(argv)
