"""Settings of a tuner installation: ``TUNER_*`` environment variables, ``.env``, ``tuner.toml``.

Precedence, highest first: command-line flags, environment variables, ``.env`` in the
working directory, ``tuner.toml`` in the working directory, the defaults below.
Secrets (the storage URL's password, the Hugging Face token) are kept as secrets: they
are never printed, logged, stored on trials or written into unit files.

    # tuner.toml
    storage = "postgresql+psycopg://tuner@db.internal/tuner"
    hosts = ["gpu-a", "gpu-b"]
    ssh_user = "inference"
    health_timeout_s = 2400
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tuner.watchdog import DEFAULT_STALL_S


class Settings(BaseSettings):
    """Installation-wide settings (see module docstring)."""

    model_config = SettingsConfigDict(
        env_prefix="TUNER_", env_file=".env", toml_file="tuner.toml", extra="ignore", env_ignore_empty=True
    )

    #: Optuna storage URL for studies (default: sqlite:///studies/<study>.db).
    storage: SecretStr | None = None
    #: Host pool for the ssh/systemd backends: ssh destinations, comma-separated in the env.
    hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ssh_user: str | None = None
    ssh_key: Path | None = None
    ssh_port: int | None = None
    #: Seconds a server gets to become healthy.
    health_timeout_s: float = Field(1800.0, gt=0)
    #: Interpreter for rendered units (overrides the space's launch.python).
    python: str | None = None
    log_level: str = "WARNING"
    #: Hugging Face token, passed to servers' environment only (units use EnvironmentFile=).
    hf_token: SecretStr | None = None
    workers: int = Field(1, ge=1)
    #: Seconds without a token, while requests are in flight, before a level is hung.
    stall_s: float = Field(DEFAULT_STALL_S, gt=0)
    #: Deadline of one sweep level, seconds (default: derived from the workload).
    level_timeout_s: float | None = Field(None, gt=0)

    @field_validator("hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip() for h in value.split(",") if h.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            dotenv_settings,
            TomlConfigSettingsSource(settings_cls),
            file_secret_settings,
        )

    def storage_url(self) -> str | None:
        return self.storage.get_secret_value() if self.storage else None

    def secret_env(self) -> dict[str, str]:
        """Environment for launched servers that must never reach records or units."""
        return {"HF_TOKEN": self.hf_token.get_secret_value()} if self.hf_token else {}


def load() -> Settings:
    """The settings of this working directory; a bad value is a usage error naming it."""
    from pydantic import ValidationError

    from tuner import redact
    from tuner.errors import UsageError

    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"settings (TUNER_* environment, .env, tuner.toml): {problems}") from None
    redact.register(settings.hf_token.get_secret_value() if settings.hf_token else None)
    redact.register_url(settings.storage_url())
    return settings
