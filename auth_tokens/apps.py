from django.apps import AppConfig


class AuthTokensConfig(AppConfig):
    name = "auth_tokens"
    verbose_name = "API clients and tokens"
