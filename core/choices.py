from django.db import models


class OutboxStatus(models.TextChoices):
    PENDING = "pending"
    PUBLISHED = "published"
