#!/usr/bin/env python3
"""Builds tests/data/tokenizer_corpus.txt, the text on which the WordPiece
tokenizer is compared with Hugging Face `tokenizers`.

    python3 tests/data/make_tokenizer_corpus.py [--fortunes DIR] [--out FILE]

One case per line, lines separated by "\\n" only: a line may hold "\\r",
"\\x0b", "\\x0c", "\\x1c"-"\\x1f", U+0085, U+2028 or U+2029, so readers must
split on "\\n" (never str.splitlines or universal newlines). The output is
deterministic for a given fortunes directory (Debian's `fortunes` package,
real English text); the hand-written lines below add accented Latin, other
scripts, CJK, emoji, odd whitespace and control characters, BERT's special
tokens, long words and lines longer than 512 tokens.
"""

import argparse
import os
import random

HAND_WRITTEN = [
    # Accented Latin and other European scripts.
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Où est la bibliothèque ? À côté de l'église, après le château.",
    "Ça va très bien, merci ! Et vous, Mademoiselle Hélène ?",
    "Straße, Größe, Fußgänger, Äpfel, Öl und Übermut — ẞ ist das große Eszett.",
    "Die Würde des Menschen ist unantastbar.",
    "¿Dónde está el niño? ¡Mañana será otro día, señor Muñoz!",
    "Camarón que se duerme se lo lleva la corriente.",
    "Tiếng Việt có dấu: Người Việt Nam, phở bò, cà phê sữa đá.",
    "Đường đi khó không vì ngăn sông cách núi.",
    "Ærøskøbing, Ålesund, Øresund — dansk og norsk.",
    "Šť in čeština: Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Zażółć gęślą jaźń — polskie znaki.",
    "İstanbul'da ılık bir gün; Iğdır ve İzmir. DİYARBAKIR, ŞIRNAK.",
    "Árvíztűrő tükörfúrógép (magyar).",
    "Ελληνικά: Καλημέρα κόσμε! ΟΔΥΣΣΕΥΣ, ἀρχὴ ἥμισυ παντός.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Українська: Ґанок, їжак, єнот. Беларуская: Ўсё.",
    "Română: Șapte țânțari și o știucă.",
    "Íslenska: Þórður og Ævar fóru í ferðalag.",
    "Lietuvių: Ąžuolas, ėglė, įlanka, šūvis, ųsai, ūkis, žąsis.",
    "naïve café résumé coöperate fiancée jalapeño piñata über",
    "NAÏVE CAFÉ RÉSUMÉ ÉCOLE ÇA",
    "ﬁnancial ﬂow ﬀ ﬃ ﬄ ligatures",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 x\u0301\u0316 q\u0323\u0302",
    "Precomposed vs decomposed: \u00e9 vs e\u0301, \u00c5 vs A\u030a, \u212b (angstrom)",
    "Kelvin \u212a and Ohm \u2126 signs; \u01c5 titlecase \u01c4 \u01c6",
    # Other scripts.
    "العربية: مرحبا بالعالم، كيف حالك؟",
    "עברית: שלום עולם! מה שלומך?",
    "हिन्दी: नमस्ते दुनिया। आप कैसे हैं?",
    "বাংলা: আমার সোনার বাংলা।",
    "தமிழ்: வணக்கம் உலகம்.",
    "ไทย: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "ქართული: გამარჯობა მსოფლიო",
    "Հայերեն: Բարեւ աշխարհ",
    "አማርኛ: ሰላም ለዓለም",
    "ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ᛫ᚠᛁᚱᚪ᛫ᚷᛖᚻᚹᛦᛚᚳᚢᛗ",
    # Chinese, Japanese, Korean.
    "中文：你好，世界！今天天气很好。",
    "机器学习是人工智能的一个分支。注意力机制（attention）很重要。",
    "繁體中文：臺灣、香港與澳門。",
    "日本語：こんにちは、世界。カタカナとひらがなと漢字。",
    "東京スカイツリーは634メートルです。ｶﾀｶﾅ（半角）もあります。",
    "한국어: 안녕하세요, 세계! 한글은 과학적인 문자입니다.",
    "Mixed: BERT는 2018년에 발표되었다; BERTは自然言語処理のモデル。",
    "CJK compatibility: \uf900\uf901\ufa0e and extension B: \U00020000\U0002a6d6 \U0002b740",
    "Fullwidth: ＡＢＣ　ａｂｃ　１２３！？ and ideographic space\u3000here",
    "Bopomofo ㄅㄆㄇ and Kangxi radicals ⼀⼆⼈ and CJK symbols 〈〉《》「」『』【】",
    # Emoji and other symbols.
    "Emoji: 😀 😂 🥰 👍🏽 ❤️ 🇫🇷 🇯🇵 👨‍👩‍👧‍👦 🏳️‍🌈",
    "Weather ☀️☁️☂️❄️ and cards ♠♥♦♣ and chess ♔♕♖♗♘♙",
    "Math: ∀x∈ℝ, ∃y: x² + y² ≤ 1 ⇒ √(x·y) ≈ π/4 ± ε; ∑∏∫∂∇",
    "Currency: $5, €10, £20, ¥1000, ₹50, ₩3000, ₿0.001, ¢99",
    "Arrows ← ↑ → ↓ ↔ ⇐ ⇒ and boxes ┌─┐│└─┘ ░▒▓█",
    "Musical 𝄞 𝄢 ♩ ♪ ♫ ♬ and math letters 𝐀𝐁𝐂 𝔸𝔹ℂ 𝒶𝒷𝒸",
    "Superscripts x⁰¹²³⁴ and subscripts H₂O, fractions ½ ⅓ ¼ ¾, roman Ⅻ ⅻ",
    "Circled Ⓐ Ⓑ ⓐ ⓑ ① ② and parenthesized ⑴ ⒜",
    "Private use: \ue000\ue001 and \U000f0000 noncharacters \ufdd0\uffff",
    "Unassigned and new: \u0378 \u0890 \U0001fae8 \U00016ea0 \U00011b00",
    # Punctuation-heavy.
    "!!!???...,,,;;;:::---___***&&&%%%$$$###@@@",
    "\"Quoted,\" she said; 'single' — (parens) [brackets] {braces} <angles>.",
    "e-mail: someone@example.com, URL: https://example.org/path?q=1&r=2#frag",
    "C++ and C#: std::vector<int> v{1,2,3}; x->y = a ? b : c; // comment",
    "~`!@#$%^&*()_+-={}|[]\\:\";'<>?,./",
    "Unicode punctuation: ‘single’ “double” «guillemets» ‹single› „low“ …ellipsis… ‽ ⁂ ※ †‡ §¶",
    "Dashes: hyphen-minus - en – em — figure ‒ horizontal ― minus − swung ⁓",
    "Spanish ¡inverted! ¿marks? and Greek question mark ; and Armenian ՞ ՜",
    "CJK punctuation：，。、；！？（）…… and ideographic full stop。",
    "Numbers: 3.14159, 1,000,000, -42, +7, 1e-10, 0x1F, 50%, 10:30am, 2024-01-15",
    "Version numbers v1.2.3-beta+build.456 and IP 192.168.0.1 and phone +1 (555) 123-4567",
    "Hashtags #MachineLearning @user_name and $TICKER and ~tilde~ and ^caret^",
    # Odd whitespace and control characters.
    "tab\tseparated\tvalues\there",
    "carriage\rreturn and vertical\x0btab and form\x0cfeed",
    "non\u00a0breaking\u00a0spaces and narrow\u202fno-break and figure\u2007space",
    "zero\u200bwidth\u200bspace and zero\u200cwidth\u200dnon-joiner and word\u2060joiner",
    "soft\u00adhyphen in hy\u00adphen\u00adation and BOM\ufeffinside",
    "Left-to-right\u200e mark and right-to-left\u200f mark and \u202aembedding\u202c",
    "en\u2002em\u2003thin\u2009hair\u200a six-per-em\u2006 spaces",
    "line\u2028separator and paragraph\u2029separator and next\u0085line",
    "ogham\u1680space and mongolian\u180evowel separator and medium\u205fmath",
    "bell\x07 backspace\x08 escape\x1b[0m delete\x7f and unit\x1fseparator\x1c\x1d\x1e",
    "NUL\x00inside and replacement \ufffd character",
    "C1 controls \x80\x81\x9f and interlinear \ufff9annotation\ufffb",
    "   leading and trailing spaces   ",
    "\t\t\t",
    " ",
    "\u3000\u3000ideographic indentation",
    "Tag characters \U000e0041\U000e0042 and variation selectors a\ufe0f b\U000e0100",
    # BERT's special tokens inside the text.
    "[CLS] already here [SEP] and [MASK] too",
    "The capital of France is [MASK].",
    "lowercase [cls] [sep] [mask] [pad] [unk] are not special",
    "glued[MASK]tokens[SEP][CLS]and[UNK][PAD]end",
    "[[MASK]] [ [CLS] ] [MASK[SEP]] [MAS K] [ MASK ]",
    "##subword ## # prefix ##ing ###",
    # Words at and beyond max_input_chars_per_word, numbers, casing.
    "a" * 99 + " " + "b" * 100 + " " + "c" * 101,
    "Supercalifragilisticexpialidocious and antidisestablishmentarianism and "
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "é" * 100 + " " + "é" * 101 + " " + "ü" * 150,
    "x" * 300,
    "ALL CAPS SHOUTING TEXT AND MiXeD cAsE wOrDs",
    "iPhone eBay McDonald's O'Reilly don't won't can't I'm you're it's",
    "1234567890 9876543210123456789 3.141592653589793238462643383279",
    "unaffable unbelievable unhappiness tokenization transformers embeddings",
]


def fortunes_lines(directory):
    """Lines of the fortunes files: single lines and whole fortunes, in a
    fixed order, with some lines upper-cased or joined with tabs."""
    names = sorted(
        name
        for name in os.listdir(directory)
        if not name.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(directory, name))
    )
    singles, wholes = [], []
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        entries = [e.strip("\n") for e in text.split("\n%\n") if e.strip()]
        lines = [line for entry in entries for line in entry.split("\n") if line.strip()]
        step = max(1, len(lines) // 18)
        singles += lines[::step][:18]
        step = max(1, len(entries) // 2)
        wholes += [" ".join(e.split("\n")) for e in entries[::step][:2]]
        wholes.append("\t".join(entries[0].split("\n")))
    return singles, wholes


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fortunes", default="/usr/share/games/fortunes")
    parser.add_argument("--out", default=os.path.join(here, "tokenizer_corpus.txt"))
    args = parser.parse_args()

    singles, wholes = fortunes_lines(args.fortunes)
    rng = random.Random(20240601)
    lines = list(singles) + list(wholes)
    # Variants: upper case, and fortunes with accented or CJK insertions.
    lines += [line.upper() for line in singles[::9]]
    lines += [line.replace("e", "é").replace("a", "à") for line in singles[5::11]]
    lines += [line.replace(" ", "\u00a0") for line in singles[7::13]]
    lines += [line.replace(" ", "中") for line in singles[3::17]]
    lines += HAND_WRITTEN
    # Empty lines and lines of many tokens (> 512 with [CLS]/[SEP]).
    lines += ["", ""]
    long_text = " ".join(wholes)
    lines += [long_text[:3000], long_text[3000:9000]]
    lines.append(" ".join(HAND_WRITTEN[:40]))
    lines.append("，".join(["机器学习"] * 300))
    lines.append(" ".join(rng.choice(["[MASK]", "a", "!", "é", "中", "😀", "\u200b"])
                          for _ in range(700)))
    # Random mixtures of the characters above.
    alphabet = sorted(set("".join(HAND_WRITTEN)) - {"\n"})
    for _ in range(60):
        lines.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))))

    assert all("\n" not in line for line in lines)
    data = "\n".join(lines) + "\n"
    assert len(data.encode("utf-8")) < 1_000_000
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(data)
    print(f"wrote {len(lines)} lines ({len(data.encode('utf-8'))} bytes) to {args.out}")


if __name__ == "__main__":
    main()
