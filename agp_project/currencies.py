"""ISO 4217 currencies and their minor units: how many decimals an amount may have.

Source: ISO 4217 "List One" (current currency and funds codes), published by SIX
Financial Information AG as the standard's maintenance agency, transcribed with its
"Minor unit" column. Codes whose minor unit the list gives as "N.A." (gold, silver,
platinum, palladium, the bond-market units, SDR, the test code XTS and "no currency" XXX)
are not money an agent can spend and are left out, so they are refused. Update this table
when the agency amends the list (docs/decisions/exact-json.md).
"""

from decimal import Decimal

# The largest amount + 1: amounts are stored as DecimalField(max_digits=18, decimal_places=4).
MAX_AMOUNT = Decimal("1e14")

_BY_MINOR_UNITS = {
    0: "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF",
    3: "BHD IQD JOD KWD LYD OMR TND",
    4: "CLF UYW",
    2: ("AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV BRL BSD BTN BWP BYN BZD "
        "CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL "
        "GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR "
        "LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD "
        "PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC "
        "SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED VES WST XCD XCG YER ZAR ZMW "
        "ZWG"),
}

MINOR_UNITS: dict[str, int] = {code: units for units, codes in _BY_MINOR_UNITS.items() for code in codes.split()}


def minor_units(currency: str) -> int | None:
    """The number of decimals of ``currency``, or None when it is not an ISO 4217 currency."""
    return MINOR_UNITS.get(currency)


def decimals_of(amount: Decimal) -> int:
    """How many decimals ``amount`` needs (trailing zeros do not count: 25.50 needs 1).

    Read from the digits, not ``normalize()``, which rounds to the context's 28 digits and
    would make 1.000...0001 (34 decimals) look like 1.
    """
    _, digits, exponent = amount.as_tuple()
    if not isinstance(exponent, int) or exponent >= 0 or not any(digits):
        return 0
    text = "".join(map(str, digits))
    trailing = len(text) - len(text.rstrip("0"))
    return max(-exponent - trailing, 0)
