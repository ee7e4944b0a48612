"""What every inventory section builds on: the strict base model and the checks of env-var names and URLs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from sbxcheck.secrets import looks_like_env_name

_NOT_A_NAME = (
    "does not look like a variable name (letters, digits and _; the value is not shown: it may be a secret)"
)


def check_env_name(field: str, value: object) -> None:
    """Refuse a string that is not an env-var name, without showing it (it may be the secret itself)."""
    if isinstance(value, str) and not looks_like_env_name(value):
        raise ValueError(f"the value of {field} {_NOT_A_NAME}")


def no_userinfo(url: str, fix: str) -> None:
    """Refuse ``http://user:PASSWORD@host``: a secret in a URL would be sent, logged and echoed."""
    authority = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        raise ValueError(f"must not carry a user name or password (user:…@host); {fix}")


class StrictSection(BaseModel):
    """Unknown fields are errors; every ``*_env`` field must hold an env-var *name*, never a value."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _env_var_names(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name and info.field_name.endswith("_env"):
            check_env_name(info.field_name, value)
        return value
