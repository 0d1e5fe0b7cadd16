"""Publish an export on the Hugging Face Hub (`scripts/export.py ... push_to_hub=<user>/<name>`)."""

from pathlib import Path

from huggingface_hub import HfApi
from transformers import AutoConfig, AutoModel, AutoTokenizer

from ..errors import CrammingError


def check_loadable(folder: Path) -> None:
    """The folder loads as users will load it (config, tokenizer, weights) before anything is uploaded."""
    AutoConfig.from_pretrained(folder, trust_remote_code=True)
    AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    AutoModel.from_pretrained(folder, trust_remote_code=True)


def push_to_hub(folder: Path, repo_id: str) -> str:
    """Create the model repo if needed and upload the folder as one commit; the commit's URL.

    Any failure (no network, offline mode, no token, a name taken) ends in one line that says the export
    on disk is complete and how to upload it later."""
    api = HfApi()
    try:
        api.create_repo(repo_id, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="Upload crammed BERT export")
    except Exception as error:  # the network boundary: connection, HTTP, auth and offline errors alike
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CrammingError(f"push_to_hub={repo_id}: the upload failed ({reason}); the export in {folder} is "
                            f"complete: upload it later with `hf upload {repo_id} {folder}`") from None
    return commit.commit_url
