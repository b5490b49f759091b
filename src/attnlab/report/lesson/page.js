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
  // On a phone a figure squeezed to the screen's width would shrink its text below 10 px: it keeps at least 80 % of
  // its natural width (where its text is at least 12.5 px) and scrolls sideways instead. Enlarged, it is shown at up
  // to twice that width (the images are drawn at twice the resolution), never wider than the window.
  function fit(img) {
    const natural = Number(img.getAttribute("width")) || img.naturalWidth / 2;
    img.style.minWidth = `${Math.round(0.8 * natural)}px`;
  }
  document.querySelectorAll("figure.zoom img").forEach((img) => {
    img.tabIndex = 0;
    fit(img);
    const toggle = () => {
      const big = img.closest("figure").classList.toggle("big");
      const natural = Number(img.getAttribute("width")) || img.naturalWidth / 2;
      img.style.width = big ? `${Math.min(2 * natural, window.innerWidth - 40)}px` : "";
      img.style.minWidth = big ? "0" : `${Math.round(0.8 * natural)}px`;
    };
    img.addEventListener("click", toggle);
    img.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); } });
  });

})();
