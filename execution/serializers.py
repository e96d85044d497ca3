from rest_framework import serializers

from agp_project.http.serializers import IdField, StrictSerializer


class LedgerEventSerializer(StrictSerializer):
    type_name = "LedgerEvent"

    sequence = serializers.IntegerField(read_only=True)
    event_id = IdField(required=False)
    event_type = serializers.RegexField(r"^client\.[A-Za-z0-9._-]{1,56}$", max_length=64, error_messages={
        "invalid": "Client events must have an event_type starting with 'client.' (letters, digits, . _ -)."})
    resource_type = serializers.CharField(max_length=64)
    resource_id = IdField()
    actor = serializers.CharField(read_only=True)
    payload = serializers.DictField(required=False, default=dict)
    payload_hash = serializers.CharField(read_only=True)
    prev_hash = serializers.CharField(read_only=True)
    hash = serializers.CharField(read_only=True)
    recorded_at = serializers.DateTimeField(read_only=True)


class LedgerVerificationSerializer(serializers.Serializer):
    verified = serializers.BooleanField()
    events = serializers.IntegerField()
    head_hash = serializers.CharField()
    first_broken_sequence = serializers.IntegerField(allow_null=True)
