from django.db import models


class OutboxStatus(models.TextChoices):
    PENDING = "pending"
    PUBLISHED = "published"


class DeliveryStatus(models.TextChoices):
    """Of one delivery attempt of a signed webhook (core/webhooks.py)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
