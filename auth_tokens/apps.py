from django.apps import AppConfig


class AuthTokensConfig(AppConfig):
    name = "auth_tokens"
    verbose_name = "API clients and tokens"

    def ready(self):
        from . import checks, schema  # noqa: F401 - register the system checks and the OpenAPI scheme
