from django.apps import AppConfig


class DecisionConfig(AppConfig):
    name = "decision"
