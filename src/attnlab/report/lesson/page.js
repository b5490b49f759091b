/* attnlab lesson page: the parts that need no model -- the test, and figures that enlarge. No network. */
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  // ---- the test ------------------------------------------------------------------------------------------------
  const form = $("quiz");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const qs = Array.from(form.querySelectorAll(".quiz-q"));
    let right = 0;
    qs.forEach((fs) => {
      const answer = fs.dataset.answer;
      const chosen = fs.querySelector("input:checked");
      const labels = Array.from(fs.querySelectorAll("label"));
      const correct = labels[Number(answer)];
      labels.forEach((lb) => lb.classList.toggle("answer", lb === correct));
      const ok = chosen !== null && chosen.value === answer;
      if (ok) right += 1;
      fs.classList.toggle("right", ok);
      fs.classList.toggle("wrong", !ok);
      const text = correct.textContent.trim();
      fs.querySelector(".quiz-feedback").textContent = (ok ? "Right. " :
        `${chosen ? "Not quite" : "Not answered"}: the answer is “${text}”. `) + fs.dataset.why;
    });
    const need = Math.ceil(0.6 * qs.length), pass = right >= need;
    const res = $("quiz-result");
    res.textContent = `You scored ${right}/${qs.length} (${Math.round((100 * right) / qs.length)} %): ` +
      `${pass ? "passed" : "not passed yet"}. The pass mark is ${need}/${qs.length} (60 %). ` +
      "The right answers are marked in green.";
    res.className = `quiz-result ${pass ? "pass" : "fail"}`;
    res.focus();
  });
  $("quiz-reset").addEventListener("click", () => {
    form.reset();
    form.querySelectorAll(".quiz-q").forEach((fs) => {
      fs.classList.remove("right", "wrong");
      fs.querySelectorAll("label").forEach((lb) => lb.classList.remove("answer"));
      fs.querySelector(".quiz-feedback").textContent = "";
    });
    $("quiz-result").textContent = "";
    $("quiz-result").className = "quiz-result";
  });

  // ---- figures: click to enlarge -------------------------------------------------------------------------------
  // A figure is drawn to the column's width, whole, however narrow the screen (max-width: 100% in the CSS): on a
  // phone its text is small, so a click (a tap) enlarges it -- to twice its natural width where the window has room
  // (the images are drawn at twice the resolution), and on a narrow window to its natural width at least, which then
  // scrolls inside the enlarged view, its 12.5 px text readable.
  document.querySelectorAll("figure.zoom img").forEach((img) => {
    img.tabIndex = 0;
    const toggle = () => {
      const big = img.closest("figure").classList.toggle("big");
      const natural = Number(img.getAttribute("width")) || img.naturalWidth / 2;
      img.style.width = big ? `${Math.min(2 * natural, Math.max(natural, window.innerWidth - 40))}px` : "";
    };
    img.addEventListener("click", toggle);
    img.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); } });
  });

  // ---- tables: fit the column; one that cannot (too many columns) scrolls, and says so ------------------------
  // A table wraps its cells to fit; where it still needs more room than the column it scrolls sideways inside
  // itself, with a line above it that says so (a scroller shows no bar on a phone until it is touched).
  function hintWide() {
    document.querySelectorAll("table, .matwrap").forEach((el) => {
      if (el.tagName === "TABLE" && el.parentElement.classList.contains("matwrap")) return;  // its wrapper scrolls
      const wide = el.scrollWidth > el.clientWidth + 1;
      const hint = el.previousElementSibling && el.previousElementSibling.classList.contains("scroll-hint")
        ? el.previousElementSibling : null;
      if (wide && !hint) {
        const p = document.createElement("p");
        p.className = "scroll-hint";
        p.textContent = "wider than the screen: scroll it sideways for every column →";
        el.before(p);
      } else if (!wide && hint) {
        hint.remove();
      }
      el.classList.toggle("wide", wide);
    });
  }
  hintWide();
  window.addEventListener("resize", hintWide);
})();
