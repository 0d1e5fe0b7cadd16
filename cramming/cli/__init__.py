"""The commands: each module is one entry point (`python pretrain.py`, `cramming-pretrain`, ...) and holds
only its Hydra wrapper; the work is done in the library. Helpers shared by them live here."""

import sys

PATH_KEYS = ("data.files",)


def quote_path_overrides(argv: list[str] | None = None, keys: tuple[str, ...] = PATH_KEYS) -> None:
    """Quote glob patterns in path overrides so Hydra's grammar accepts them.

    The shell strips the quotes of `data.files='shards/train-00[01].txt.gz'`; Hydra would then read
    `[01]` as a list and reject the override. A value that already is a list (`[a,b]`) or quoted is kept.
    """
    argv = sys.argv if argv is None else argv
    for index, argument in enumerate(argv):
        key, sep, value = argument.partition("=")
        if sep and key.lstrip("+~") in keys and value and value[0] not in "'\"[":
            argv[index] = f"{key}='{value}'" if "'" not in value else f'{key}="{value}"'
