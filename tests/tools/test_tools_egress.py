"""No built-in tool can send data anywhere without passing the approval gate."""

from plans.tools import get_registry

# Parameters through which a call could carry data out to an address of the caller's choosing.
ADDRESS_WORDS = ("to", "url", "uri", "address", "email", "host", "endpoint", "recipient", "webhook")


def test_every_built_in_tool_that_takes_an_address_is_destructive():
    for name, spec in get_registry().items():
        # A fixed set of choices (an enum) cannot carry an address; free text can.
        takes_address = any(
            word in parameter.lower().split("_") and "enum" not in schema
            for parameter, schema in spec.schema.get("properties", {}).items()
            for word in ADDRESS_WORDS
        )
        if takes_address:
            assert spec.destructive, f"{name} can send data to an address without approval"


def test_the_email_tool_is_among_them():
    assert get_registry()["send_email"].destructive
    assert "to" in get_registry()["send_email"].schema["properties"]
