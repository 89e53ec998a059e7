"""An XML element's content as one text to translate, and its content replaced by the translation: for the formats
whose XML is read here (XLIFF, OpenDocument). The element's inline children (and their namespace prefixes) stay in the
text as they are, so the markup layer keeps them as marks around the words they enclose."""

from __future__ import annotations

from lxml import etree


def parser() -> etree.XMLParser:
    """lxml reading a file's XML: no entity expansion, no DTD, nothing from the network (entity declarations are
    refused before: archive.declares_entities)."""
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)


def inner_xml(element) -> str:
    """The element's content as XML text: its text, then each child with its tail (serialized within the element, so
    the children's prefixes are declared once, on the element)."""
    if not len(element) and not element.text:
        return ""
    whole = etree.tostring(element, encoding="unicode", with_tail=False)
    return whole.split(">", 1)[1].rsplit("</", 1)[0]  # lxml escapes ">" in attribute values


def fill(element, fragment: str) -> None:
    """The element's content replaced by the XML `fragment`, read with the namespaces in scope there."""
    declared = " ".join(f'xmlns:{prefix}="{uri}"' if prefix else f'xmlns="{uri}"'
                        for prefix, uri in element.nsmap.items())
    wrapper = etree.fromstring(f"<wrapper {declared}>{fragment}</wrapper>", parser())
    for child in list(element):
        element.remove(child)
    element.text = wrapper.text
    element.extend(list(wrapper))
